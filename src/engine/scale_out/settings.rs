//! Redis's own settings that the guarantees depend on, checked at start, after every
//! reconnect and every [`RECHECK`] while serving.
//!
//! - `maxmemory-policy` must be `noeviction`: any evicting policy may drop a stream entry
//!   before the pipeline read it (an answered `won` lost) or a campaign's keys (claims on a
//!   live campaign rebuilt or refused). Another policy refuses to start unless the operator
//!   passes `--allow-redis-eviction`; a policy changed at runtime makes claims answer 503
//!   ("nothing was changed") until it is restored.
//! - `appendonly yes` with `appendfsync always` is what makes an answered `won` survive a
//!   Redis crash. Anything else logs one warning naming the loss window (docs/SCALE_OUT.md).
//!
//! Managed Redis often disables `CONFIG`: then `INFO memory` / `INFO persistence` are read
//! (they carry the policy and whether AOF is on, not the fsync mode); if neither answers,
//! that is said once and the settings show as unknown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::redis_conn::RedisConn;

/// How often a serving instance re-reads the settings.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What Redis says about itself; `None` where it would not say.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Settings {
    pub maxmemory_policy: Option<String>,
    pub appendonly: Option<bool>,
    pub appendfsync: Option<String>,
    /// `config`, `info` or `unknown`.
    pub source: &'static str,
}

impl Settings {
    pub fn evicts(&self) -> bool {
        self.maxmemory_policy
            .as_deref()
            .is_some_and(|p| p != "noeviction")
    }

    /// The loss window these persistence settings leave, if not "none".
    pub fn loss_window(&self) -> Option<&'static str> {
        match (self.appendonly, self.appendfsync.as_deref()) {
            (Some(false), _) => Some(
                "AOF is off: a Redis crash loses every answered win since the last RDB snapshot \
                 (docs/SCALE_OUT.md, persistence)",
            ),
            // INFO does not tell the fsync mode: no warning on a guess.
            (Some(true), Some("always") | None) | (None, _) => None,
            (Some(true), Some("everysec")) => Some(
                "appendfsync everysec: a machine crash loses about the last second of answered \
                 wins (docs/SCALE_OUT.md, persistence)",
            ),
            (Some(true), _) => Some(
                "appendfsync is neither always nor everysec: a machine crash loses answered wins \
                 the OS had not yet written (up to about 30 s; docs/SCALE_OUT.md, persistence)",
            ),
        }
    }
}

/// Reads the settings: `CONFIG GET`, else `INFO`, else unknown.
pub async fn read(conn: &RedisConn) -> Settings {
    let mut c = conn.clone();
    let config = async {
        let get = |name: &'static str| {
            let mut c = c.clone();
            async move {
                let pair: Vec<String> = redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async(&mut c)
                    .await?;
                redis::RedisResult::Ok(pair.get(1).cloned())
            }
        };
        let policy = get("maxmemory-policy").await?;
        let aof = get("appendonly").await?;
        let fsync = get("appendfsync").await?;
        redis::RedisResult::Ok(Settings {
            maxmemory_policy: policy,
            appendonly: aof.map(|v| v == "yes"),
            appendfsync: fsync,
            source: "config",
        })
    };
    if let Ok(s) = config.await {
        if s.maxmemory_policy.is_some() {
            return s;
        }
    }
    let memory: redis::RedisResult<String> =
        redis::cmd("INFO").arg("memory").query_async(&mut c).await;
    let persistence: redis::RedisResult<String> = redis::cmd("INFO")
        .arg("persistence")
        .query_async(&mut c)
        .await;
    let field = |text: &str, key: &str| info_field(text, key).map(str::to_owned);
    match (memory, persistence) {
        (Err(_), Err(_)) => Settings {
            source: "unknown",
            ..Settings::default()
        },
        (m, p) => Settings {
            maxmemory_policy: m.ok().and_then(|m| field(&m, "maxmemory_policy")),
            appendonly: p
                .ok()
                .and_then(|p| field(&p, "aof_enabled"))
                .map(|v| v == "1"),
            appendfsync: None,
            source: "info",
        },
    }
}

/// The settings last read, and what has been said about them.
pub struct Watch {
    allow_eviction: bool,
    current: Mutex<Settings>,
    refusing: AtomicBool,
    /// The label set last exported as `seckill_redis_settings` (set to 0 when it changes).
    exported: Mutex<Option<Vec<metrics::Label>>>,
}

impl Watch {
    /// Reads the settings at start; an evicting policy is an error unless allowed.
    pub async fn start(conn: &RedisConn, allow_eviction: bool) -> anyhow::Result<Self> {
        let s = read(conn).await;
        if s.evicts() {
            let policy = s.maxmemory_policy.as_deref().unwrap_or_default();
            anyhow::ensure!(
                allow_eviction,
                "Redis runs with maxmemory-policy {policy}: it may evict answered orders before \
                 they reach PostgreSQL. Set `maxmemory-policy noeviction` on Redis, or pass \
                 --allow-redis-eviction to accept losing answered wins"
            );
            tracing::warn!(policy, "Redis may evict keys; running anyway (--allow-redis-eviction): answered wins can be lost");
        }
        let me = Self {
            allow_eviction,
            current: Mutex::new(Settings::default()),
            exported: Mutex::new(None),
            refusing: AtomicBool::new(false),
        };
        me.note(s);
        Ok(me)
    }

    /// Records freshly read settings, logging each change once.
    pub fn note(&self, s: Settings) {
        let mut cur = self.current.lock();
        if *cur == s {
            return;
        }
        if s.source == "unknown" && cur.source != "unknown" {
            tracing::warn!("Redis answers neither CONFIG GET nor INFO: its eviction policy and persistence cannot be checked");
        }
        if s.loss_window() != cur.loss_window() {
            if let Some(window) = s.loss_window() {
                tracing::warn!(appendonly = ?s.appendonly, appendfsync = ?s.appendfsync, "Redis persistence is weaker than AOF always: {window}");
            }
        }
        let refuse = s.evicts() && !self.allow_eviction;
        if refuse != self.refusing.swap(refuse, Ordering::Relaxed) {
            if refuse {
                tracing::error!(policy = ?s.maxmemory_policy, "Redis's maxmemory-policy changed to an evicting one: refusing claims until it is noeviction again");
            } else {
                tracing::info!("Redis's maxmemory-policy is noeviction again: serving claims");
            }
        }
        *cur = s;
    }

    /// True while claims must be refused (an evicting policy that was not allowed).
    pub fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    pub fn current(&self) -> Settings {
        self.current.lock().clone()
    }

    /// Sets `seckill_redis_settings` (1 on the current label set, 0 on the one it replaced)
    /// and `seckill_redis_refusing_claims`.
    pub fn refresh_metrics(&self, registry: &crate::telemetry::Registry) {
        use crate::telemetry::catalog;
        use metrics::Label;
        let s = self.current();
        let aof = match s.appendonly {
            Some(true) => "yes",
            Some(false) => "no",
            None => "unknown",
        };
        let labels = vec![
            Label::new(
                "maxmemory_policy",
                s.maxmemory_policy.clone().unwrap_or("unknown".into()),
            ),
            Label::from_static_parts("appendonly", aof),
            Label::new(
                "appendfsync",
                s.appendfsync.clone().unwrap_or("unknown".into()),
            ),
            Label::from_static_parts("source", s.source),
        ];
        let mut last = self.exported.lock();
        if let Some(old) = last.take().filter(|old| *old != labels) {
            registry.gauge(catalog::REDIS_SETTINGS, old).set(0.0);
        }
        registry
            .gauge(catalog::REDIS_SETTINGS, labels.clone())
            .set(1.0);
        *last = Some(labels);
        registry
            .gauge(catalog::REDIS_REFUSING, Vec::new())
            .set(f64::from(u8::from(self.refusing())));
    }
}

/// Re-reads the settings every [`RECHECK`] and at once after each reconnect, until `watch` is
/// dropped.
pub async fn recheck_loop(conn: RedisConn, watch: std::sync::Weak<Watch>) -> anyhow::Result<()> {
    let mut link = conn.watch();
    loop {
        let Some(w) = watch.upgrade() else {
            return Ok(());
        };
        let s = read(&conn).await;
        // Unreachable Redis says nothing about its settings: keep the last ones.
        if !(s.source == "unknown" && link.as_ref().is_some_and(|l| !l.borrow().up)) {
            w.note(s);
        }
        drop(w);
        match link.as_mut() {
            Some(l) => {
                tokio::select! {
                    _ = tokio::time::sleep(RECHECK) => {}
                    _ = l.changed() => {}
                }
            }
            None => tokio::time::sleep(RECHECK).await,
        }
    }
}

/// The value of `key` in an `INFO` reply (`key:value` lines), trimmed.
pub fn info_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(policy: &str, aof: Option<bool>, fsync: Option<&str>) -> Settings {
        Settings {
            maxmemory_policy: Some(policy.into()),
            appendonly: aof,
            appendfsync: fsync.map(str::to_owned),
            source: "config",
        }
    }

    #[test]
    fn only_noeviction_is_safe_and_only_aof_always_has_no_loss_window() {
        assert!(!settings("noeviction", Some(true), Some("always")).evicts());
        assert!(settings("allkeys-lru", Some(true), Some("always")).evicts());
        assert!(settings("volatile-ttl", None, None).evicts());
        assert_eq!(
            settings("noeviction", Some(true), Some("always")).loss_window(),
            None
        );
        for (aof, fsync, says) in [
            (Some(false), None, "last RDB snapshot"),
            (Some(true), Some("everysec"), "last second"),
            (Some(true), Some("no"), "30 s"),
        ] {
            let w = settings("noeviction", aof, fsync).loss_window().unwrap();
            assert!(w.contains(says) && w.contains("SCALE_OUT.md"), "{w}");
        }
        // INFO does not tell the fsync mode: no warning on a guess.
        assert_eq!(settings("noeviction", Some(true), None).loss_window(), None);
    }
}
