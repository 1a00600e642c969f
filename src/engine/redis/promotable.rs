//! Which replica acknowledgements survive a failover: a write counts only once every replica
//! Sentinel could promote has it, on the primary Sentinel names, while no failover is near.
//!
//! `WAIT n` counts any `n` replicas connected to the primary, but Sentinel does not promote
//! any replica: it skips priority 0 and replicas it sees down, then takes the *lowest
//! priority* first and only then the highest offset. So with replicas of priority 2 and 100,
//! a win acknowledged by the priority-100 one alone is lost when the priority-2 one is
//! promoted; a priority-0 replica's acknowledgement carries nothing; and during a graceful
//! `SENTINEL FAILOVER` a replica still following the old primary acknowledges writes that are
//! thrown away when it is re-pointed.
//!
//! Behind Sentinel a wait therefore asks a majority of the sentinels (once per round trip,
//! shared with every wait that began before it, errors included) for the primary, its flags
//! and its replicas, and reads the primary's `INFO replication`:
//!
//! - every replica connected to the primary must acknowledge (`WAIT connected`), so whichever
//!   candidate Sentinel picks has the write; a candidate Sentinel knows that is *not*
//!   connected (it would be promoted with a stale copy) refuses the wait, and fewer than `n`
//!   connected candidates refuse it too (`View::need`);
//! - the wait counts only if the sentinels, asked after the replicas answered, agree that the
//!   server written to is the primary and none sees it down (`s_down`, `o_down`) or has a
//!   failover in progress: a promotion that began before the acknowledgements shows as one of
//!   these (a failover takes seconds), and the promoted replica stops acknowledging the old
//!   primary the moment it is promoted.
//!
//! The price: one lagging replica (even a priority-0 one) slows every wait
//! (docs/SCALE_OUT.md, "Only acknowledgements a failover keeps count").

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo};
use tokio::sync::Mutex;

use super::link::Link;

type Addr = (String, u16);

/// How long one sentinel may take to answer: a silent one must not stall claim batches.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(300);

/// What the sentinels and the primary said, asked at `asked`.
#[derive(Debug, Clone)]
pub struct View {
    pub asked: Instant,
    /// The primary every answering sentinel names (`None` if they disagree).
    pub primary: Option<Addr>,
    /// A sentinel has a failover in progress or sees the primary down.
    pub failover: bool,
    /// Replicas online at the primary (its `INFO replication`).
    pub connected: u32,
    /// Of those, the ones every answering sentinel could promote.
    pub candidates: u32,
    /// Replicas some sentinel could promote that are not online at the primary.
    pub stray: Vec<Addr>,
}

impl View {
    /// How many replicas a write to `server` must reach so that `n` replicas Sentinel could
    /// promote, and every one it could pick, have it; the reason when none will do.
    pub fn need(&self, n: u32, server: &ConnectionAddr) -> anyhow::Result<u32> {
        anyhow::ensure!(
            !self.failover,
            "a Sentinel failover is in progress or the primary is seen down"
        );
        let same = match (&self.primary, server) {
            (Some((h, p)), ConnectionAddr::Tcp(host, port)) => h == host && p == port,
            _ => false,
        };
        anyhow::ensure!(
            same,
            "the sentinels name {:?} as the primary, not the server written to",
            self.primary
        );
        anyhow::ensure!(
            self.stray.is_empty(),
            "replicas Sentinel could promote are not connected to the primary: {:?}",
            self.stray
        );
        anyhow::ensure!(
            self.candidates >= n,
            "{} connected replicas Sentinel could promote, {n} required",
            self.candidates
        );
        Ok(self.connected)
    }
}

/// The last view asked, or why it could not be.
struct Asked {
    at: Instant,
    view: Result<View, String>,
}

/// The sentinels of one primary, asked at most once per round trip.
pub struct Promotable {
    sentinels: Vec<(ConnectionInfo, Mutex<Option<MultiplexedConnection>>)>,
    master: String,
    /// Held while asking: waits that arrive meanwhile share the answer.
    last: Mutex<Option<Asked>>,
}

fn config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(SENTINEL_TIMEOUT)
        .set_response_timeout(SENTINEL_TIMEOUT)
}

/// One sentinel's answer: the primary, whether a failover is near, the replicas it could
/// promote.
struct Said {
    primary: Addr,
    failover: bool,
    promotable: HashSet<Addr>,
}

impl Promotable {
    pub fn new(sentinels: &[ConnectionInfo], master: &str) -> Self {
        Self {
            sentinels: sentinels
                .iter()
                .map(|s| (s.clone(), Mutex::new(None)))
                .collect(),
            master: master.to_owned(),
            last: Mutex::new(None),
        }
    }

    /// A view asked at or after `since`: the last one if it qualifies (a failure to ask
    /// included, so a silent sentinel is waited for once per round, not once per wait),
    /// otherwise a new one.
    pub async fn view_since(&self, since: Instant, link: &Link) -> anyhow::Result<View> {
        let mut last = self.last.lock().await;
        if let Some(a) = last.as_ref().filter(|a| a.at >= since) {
            return a.view.clone().map_err(anyhow::Error::msg);
        }
        let at = Instant::now();
        let view = self.ask(at, link).await.map_err(|e| format!("{e:#}"));
        *last = Some(Asked {
            at,
            view: view.clone(),
        });
        view.map_err(anyhow::Error::msg)
    }

    async fn ask(&self, asked: Instant, link: &Link) -> anyhow::Result<View> {
        let info = link
            .request(redis::cmd("INFO").arg("replication"))
            .await
            .map_err(|e| anyhow::anyhow!("INFO replication of the primary failed: {e}"))?;
        let connected: HashSet<Addr> =
            connected_replicas(&redis::from_redis_value::<String>(&info)?)
                .into_iter()
                .collect();
        let answers =
            futures::future::join_all(self.sentinels.iter().map(|(info, conn)| async move {
                let r = tokio::time::timeout(SENTINEL_TIMEOUT, self.ask_one(info, conn))
                    .await
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer in {SENTINEL_TIMEOUT:?}")));
                if r.is_err() {
                    *conn.lock().await = None;
                }
                r
            }))
            .await;
        let mut said = Vec::new();
        let mut last_err = None;
        for a in answers {
            match a {
                Ok(s) => said.push(s),
                Err(e) => last_err = Some(e),
            }
        }
        // A failover needs a majority of the sentinels: fewer answering could all be the
        // ones that have not heard of it.
        anyhow::ensure!(
            said.len() * 2 > self.sentinels.len(),
            "{} of {} sentinels answered: {}",
            said.len(),
            self.sentinels.len(),
            last_err.map_or_else(|| "none given".to_owned(), |e| format!("{e:#}"))
        );
        let first = &said[0].primary;
        let agree = said.iter().all(|s| &s.primary == first);
        let stray: HashSet<&Addr> = said
            .iter()
            .flat_map(|s| s.promotable.iter())
            .filter(|r| !connected.contains(*r))
            .collect();
        let candidates = connected
            .iter()
            .filter(|r| said.iter().all(|s| s.promotable.contains(*r)))
            .count();
        Ok(View {
            asked,
            primary: agree.then(|| first.clone()),
            failover: said.iter().any(|s| s.failover),
            connected: connected.len() as u32,
            candidates: candidates as u32,
            stray: stray.into_iter().cloned().collect(),
        })
    }

    /// One sentinel's view of the primary and its replicas.
    async fn ask_one(
        &self,
        info: &ConnectionInfo,
        slot: &Mutex<Option<MultiplexedConnection>>,
    ) -> anyhow::Result<Said> {
        let mut conn = {
            let mut slot = slot.lock().await;
            match slot.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = redis::Client::open(info.clone())?
                        .get_multiplexed_async_connection_with_config(&config())
                        .await?;
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        let (master, replicas): (HashMap<String, String>, Vec<HashMap<String, String>>) =
            redis::pipe()
                .cmd("SENTINEL")
                .arg("MASTER")
                .arg(&self.master)
                .cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(&self.master)
                .query_async(&mut conn)
                .await?;
        let field = |m: &HashMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_default();
        let port: u16 = field(&master, "port").parse()?;
        let failover = field(&master, "flags")
            .split(',')
            .any(|f| matches!(f, "failover_in_progress" | "s_down" | "o_down"));
        let down_after: u64 = field(&master, "down-after-milliseconds")
            .parse()
            .unwrap_or(30_000);
        let promotable = replicas
            .iter()
            .filter(|r| promotable(r, down_after))
            .filter_map(|r| Some((field(r, "ip"), field(r, "port").parse().ok()?)))
            .collect();
        Ok(Said {
            primary: (field(&master, "ip"), port),
            failover,
            promotable,
        })
    }
}

/// The replicas `INFO replication` of a primary lists as online.
fn connected_replicas(info: &str) -> Vec<Addr> {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains(":ip="))
        .filter_map(|l| {
            let fields: HashMap<&str, &str> = l
                .split_once(':')?
                .1
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .collect();
            (fields.get("state") == Some(&"online")).then(|| {
                Some((
                    fields.get("ip")?.to_string(),
                    fields.get("port")?.parse().ok()?,
                ))
            })?
        })
        .collect()
}

/// Whether Sentinel could pick this replica: not priority 0, not seen down, and not cut off
/// from the primary for longer than Sentinel's own limit (ten down-after periods).
fn promotable(replica: &HashMap<String, String>, down_after_ms: u64) -> bool {
    let priority = replica
        .get("slave-priority")
        .or(replica.get("replica-priority"));
    let flags = replica.get("flags").map(String::as_str).unwrap_or_default();
    let cut_off = replica.get("master-link-status").map(String::as_str) == Some("err")
        && replica
            .get("master-link-down-time")
            .and_then(|t| t.parse::<u64>().ok())
            .is_some_and(|ms| ms > down_after_ms.saturating_mul(10));
    priority.is_some_and(|p| p != "0")
        && !cut_off
        && !flags
            .split(',')
            .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(connected: u32, candidates: u32, stray: usize) -> View {
        View {
            asked: Instant::now(),
            primary: Some(("127.0.0.1".into(), 7000)),
            failover: false,
            connected,
            candidates,
            stray: vec![("127.0.0.1".into(), 7009); stray],
        }
    }

    #[test]
    fn every_connected_replica_must_acknowledge_and_every_candidate_be_connected() {
        let server = ConnectionAddr::Tcp("127.0.0.1".into(), 7000);
        assert_eq!(view(3, 2, 0).need(1, &server).unwrap(), 3);
        assert!(view(3, 2, 1).need(1, &server).is_err(), "a stray candidate");
        assert!(
            view(2, 0, 0).need(1, &server).is_err(),
            "only priority-0 replicas"
        );
        let other = ConnectionAddr::Tcp("127.0.0.1".into(), 7001);
        assert!(view(3, 2, 0).need(1, &other).is_err(), "not the primary");
        let mut v = view(3, 2, 0);
        v.failover = true;
        assert!(v.need(1, &server).is_err());
    }

    #[test]
    fn a_replica_cut_off_longer_than_sentinel_allows_is_not_a_candidate() {
        let r = |status: &str, down: &str, prio: &str, flags: &str| {
            HashMap::from([
                ("master-link-status".to_owned(), status.to_owned()),
                ("master-link-down-time".to_owned(), down.to_owned()),
                ("slave-priority".to_owned(), prio.to_owned()),
                ("flags".to_owned(), flags.to_owned()),
            ])
        };
        assert!(promotable(&r("ok", "0", "100", "slave"), 5000));
        assert!(promotable(&r("err", "2000", "100", "slave"), 5000));
        assert!(!promotable(&r("err", "60000", "100", "slave"), 5000));
        assert!(!promotable(&r("ok", "0", "0", "slave"), 5000));
        assert!(!promotable(&r("ok", "0", "100", "slave,s_down"), 5000));
    }
}
