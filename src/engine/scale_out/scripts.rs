//! The Lua scripts of the gate (`lua/*.lua`, each with a KEYS/ARGV header) and typed calls.
//!
//! Scripts are loaded once at start (`SCRIPT LOAD`, on every primary of a cluster) and called
//! by SHA (`EVALSHA`); redis-rs's `invoke_async` loads a script again when Redis answers
//! NOSCRIPT, so a Redis restart or a failover to a replica with an empty script cache costs
//! one extra round trip and nothing else. Pipelined calls would not reload, so none are used.

use redis::{RedisResult, Script};

use super::keys::{Keys, GROUP};
use crate::redis_conn::RedisConn;
use chrono::DateTime;

use crate::domain::{ClaimAnswer, OrderState, Outcome};
use crate::engine::state::CampaignState;

pub struct Scripts {
    claim: Script,
    /// A batch of claims (`batch.rs`).
    pub(super) claims: Script,
    install: Script,
    restock: Script,
    status: Script,
    release: Script,
    ack: Script,
    fence: Script,
    /// A campaign behind the ledger taken out of service (`fresh.rs`, `lineage.rs`).
    pub(super) drop_stale: Script,
    /// A campaign's check on a Redis Cluster node (`lineage.rs`).
    pub(super) lineage: Script,
    /// Confirm, cancel and expiry of pending orders (`holds.rs`).
    pub(super) holds: super::held::HoldScripts,
}

/// Times one script call into `seckill_redis_script_duration_seconds{script}` (until dropped).
pub(super) fn timer(script: &str) -> crate::telemetry::process::Timer<'static> {
    crate::telemetry::process::Timer::start(crate::telemetry::process::handles().script(script))
}

/// What the claim script decided.
pub enum Claimed {
    Answer(ClaimAnswer),
    /// The campaign is not in Redis (unknown, or to be rebuilt from the ledger).
    Missing,
    /// The gate of this campaign is fenced while it is rebuilt; nothing was changed.
    Fenced,
    /// Fewer replicas in sync than `--redis-wait-replicas` asks for: nothing was decided.
    NoReplicas,
    /// Redis Cluster: the node serving the campaign was not checked against the ledger on its
    /// replication lineage yet (a failover, `lineage.rs`); nothing was decided.
    Unchecked,
}

/// Result of a guarded script: applied, refused with the gate's value, or campaign missing.
#[derive(Debug, PartialEq, Eq)]
pub enum Guarded {
    Ok(String),
    Refused(String),
    Missing,
}

fn guarded((tag, value): (String, String)) -> Guarded {
    match tag.as_str() {
        "ok" => Guarded::Ok(value),
        "missing" => Guarded::Missing,
        _ => Guarded::Refused(value),
    }
}

/// Decodes the line format of `claim.lua` (outcome, order_id, qty, remaining, held, codes…;
/// the outcome `won:<pay_by µs>` is a pending order of a campaign with holds).
pub fn decode_answer(encoded: &str) -> Option<ClaimAnswer> {
    let mut lines = encoded.split('\n');
    let first = lines.next()?;
    let (outcome, pay_by) = match first.split_once(':') {
        Some((o, micros)) => {
            let pay_by = micros
                .parse()
                .ok()
                .and_then(DateTime::from_timestamp_micros)?;
            (o, Some(pay_by))
        }
        None => (first, None),
    };
    let outcome = Outcome::ALL.into_iter().find(|o| o.as_str() == outcome)?;
    let text = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(str::to_owned);
    let order_id = text(lines.next());
    let mut num = || -> Option<Option<u64>> {
        match lines.next() {
            None | Some("") => Some(None),
            Some(s) => s.parse().ok().map(Some),
        }
    };
    let (qty, remaining, held) = (num()?, num()?, num()?);
    let codes: Vec<String> = lines.map(str::to_owned).collect();
    Some(ClaimAnswer {
        outcome,
        order_id,
        qty,
        codes: (!codes.is_empty()).then_some(codes),
        remaining,
        held,
        state: pay_by.map(|_| OrderState::Pending),
        pay_by,
    })
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            claim: Script::new(include_str!("lua/claim.lua")),
            claims: Script::new(include_str!("lua/claims.lua")),
            install: Script::new(include_str!("lua/install.lua")),
            restock: Script::new(include_str!("lua/restock.lua")),
            status: Script::new(include_str!("lua/status.lua")),
            release: Script::new(include_str!("lua/release.lua")),
            ack: Script::new(include_str!("lua/ack.lua")),
            fence: Script::new(include_str!("lua/fence.lua")),
            drop_stale: Script::new(include_str!("lua/drop_stale.lua")),
            lineage: Script::new(include_str!("lua/lineage.lua")),
            holds: super::held::HoldScripts::default(),
        }
    }
}

impl Scripts {
    /// Loads every script into Redis's script cache.
    pub async fn load(&self, conn: &mut RedisConn) -> RedisResult<()> {
        for s in [
            &self.claim,
            &self.claims,
            &self.install,
            &self.restock,
            &self.status,
            &self.release,
            &self.ack,
            &self.fence,
            &self.drop_stale,
            &self.lineage,
            &self.holds.confirm,
            &self.holds.cancel,
            &self.holds.expire,
        ] {
            s.prepare_invoke().load_async(conn).await?;
        }
        Ok(())
    }

    pub async fn claim(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        user: &str,
        qty: u64,
        idem_key: Option<&str>,
        // Retention of won answers in seconds, and what is kept of the other answers.
        (idem_ttl_secs, rejected): (u64, &crate::engine::IdemLimits),
    ) -> anyhow::Result<Claimed> {
        let k = Keys::new(campaign);
        let mut inv = self.claim.prepare_invoke();
        inv.key(k.meta())
            .key(k.users())
            .key(k.codes())
            .key(k.seq())
            .key(k.orders())
            .key(k.held())
            .key(k.deadlines());
        if let Some(key) = idem_key {
            inv.key(k.idem(user, key)).key(k.idem_rejected());
        }
        inv.arg(user)
            .arg(qty)
            .arg(idem_ttl_secs)
            .arg(rejected.rejected_ttl.num_seconds().max(1))
            .arg(rejected.per_user)
            .arg(rejected.per_campaign);
        let _t = timer("claim");
        let (tag, encoded): (String, String) = inv.invoke_async(conn).await?;
        if tag == "missing" {
            return Ok(Claimed::Missing);
        }
        if tag == "fenced" {
            return Ok(Claimed::Fenced);
        }
        decode_answer(&encoded)
            .map(Claimed::Answer)
            .ok_or_else(|| anyhow::anyhow!("the claim script answered {encoded:?}"))
    }

    /// Fences a campaign (claims refused) or, with `drop`, deletes its fenced gate once its
    /// stream is empty (`lua/fence.lua`); true if done.
    pub async fn fence(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        drop: bool,
    ) -> RedisResult<bool> {
        let k = Keys::new(campaign);
        let done: i64 = self
            .fence
            .key(k.meta())
            .key(k.orders())
            .arg(if drop { "drop" } else { "fence" })
            .invoke_async(conn)
            .await?;
        Ok(done == 1)
    }

    /// Installs `state` unless the campaign is already in Redis; true if installed now.
    pub async fn install(
        &self,
        conn: &mut RedisConn,
        state: &CampaignState,
        seq: u64,
        released: &[String],
    ) -> RedisResult<bool> {
        let def = &state.def;
        let k = Keys::new(&def.id);
        let micros = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map(|t| t.timestamp_micros().to_string())
                .unwrap_or_default()
        };
        let mut inv = self.install.prepare_invoke();
        inv.key(k.meta())
            .key(k.users())
            .key(k.codes())
            .key(k.seq())
            .key(k.orders())
            .key(k.released())
            .key(k.held())
            .key(k.deadlines());
        inv.arg(&def.id)
            .arg(def.kind.as_str())
            .arg(state.total)
            .arg(state.remaining)
            .arg(def.per_user_limit)
            .arg(state.status.as_str())
            .arg(micros(def.starts_at))
            .arg(micros(def.ends_at))
            .arg(seq)
            .arg(GROUP)
            .arg(def.hold_seconds.map(|h| h.to_string()).unwrap_or_default());
        let holders: Vec<(&str, u64)> = state.holdings().collect();
        inv.arg(holders.len());
        for (user, held) in holders {
            inv.arg(user).arg(held);
        }
        inv.arg(released.len());
        for id in released {
            inv.arg(id);
        }
        let held: Vec<_> = state.holds.iter().collect();
        inv.arg(held.len());
        for (seq, h) in held {
            let hold = i64::from(def.hold_seconds.unwrap_or(0));
            let at = h.pay_by - chrono::TimeDelta::seconds(hold);
            inv.arg(format!("{}-{seq}", def.id))
                .arg(h.pay_by.timestamp_micros())
                .arg(super::held::held_lines(
                    &h.user_id, h.qty, at, h.pay_by, &h.codes,
                ));
        }
        for code in state.pool() {
            inv.arg(code);
        }
        let installed: i64 = inv.invoke_async(conn).await?;
        Ok(installed == 1)
    }

    /// Adds `units` (and `codes`) if the gate's total is still `before`.
    pub async fn restock(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        before: u64,
        units: u64,
        codes: &[String],
    ) -> RedisResult<Guarded> {
        let k = Keys::new(campaign);
        let mut inv = self.restock.prepare_invoke();
        inv.key(k.meta()).key(k.codes()).arg(before).arg(units);
        for c in codes {
            inv.arg(c);
        }
        let _t = timer("restock");
        Ok(guarded(inv.invoke_async(conn).await?))
    }

    /// Sets the status; `Ok(previous)`, `Refused(previous)` for a closed campaign.
    pub async fn status(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        status: &str,
        force: bool,
    ) -> RedisResult<Guarded> {
        let mut inv = self.status.prepare_invoke();
        inv.key(Keys::new(campaign).meta())
            .arg(status)
            .arg(if force { "force" } else { "" });
        let _t = timer("status");
        Ok(guarded(inv.invoke_async(conn).await?))
    }

    /// Gives an order's units, codes and allowance back, at most once per order id.
    /// Returns 1 (released now), 0 (already released) or -1 (campaign not in Redis).
    pub async fn release(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        order_id: &str,
        user: &str,
        qty: u64,
        codes: &[String],
    ) -> RedisResult<i64> {
        let k = Keys::new(campaign);
        let mut inv = self.release.prepare_invoke();
        inv.key(k.meta())
            .key(k.users())
            .key(k.codes())
            .key(k.released())
            .key(k.held())
            .key(k.deadlines())
            .arg(order_id)
            .arg(user)
            .arg(qty);
        for c in codes {
            inv.arg(c);
        }
        let _t = timer("release");
        inv.invoke_async(conn).await
    }

    /// Acknowledges and deletes stream entries of a campaign.
    pub async fn ack(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        ids: &[(String, u64)],
    ) -> RedisResult<u64> {
        let mut acked = 0;
        let k = Keys::new(campaign);
        for chunk in ids.chunks(2000) {
            let mut inv = self.ack.prepare_invoke();
            inv.key(k.orders()).key(k.packed()).arg(GROUP);
            for (id, orders) in chunk {
                match orders {
                    0 | 1 => inv.arg(id),
                    n => inv.arg(format!("{id}+{}", n - 1)),
                };
            }
            let _t = timer("ack");
            acked += inv.invoke_async::<u64>(conn).await?;
        }
        Ok(acked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decode() {
        let won = decode_answer("won\np-7\n1\n\n\nK7F-002").unwrap();
        assert_eq!(won.order_id.as_deref(), Some("p-7"));
        assert_eq!(won.codes, Some(vec!["K7F-002".to_string()]));
        let sold = decode_answer("sold_out\n\n\n0\n").unwrap();
        assert_eq!(
            (sold.outcome, sold.remaining, sold.codes),
            (Outcome::SoldOut, Some(0), None)
        );
        let pending = decode_answer("won:1700000000000001\np-8\n1\n\n").unwrap();
        assert_eq!(pending.state, Some(OrderState::Pending));
        assert_eq!(
            pending.pay_by,
            DateTime::from_timestamp_micros(1_700_000_000_000_001)
        );
        assert!(decode_answer("won:soon\np-8\n1\n\n").is_none());
        let paused = decode_answer("paused\n\n\n\n").unwrap();
        assert_eq!(paused, ClaimAnswer::bare(Outcome::Paused));
        assert!(decode_answer("nonsense").is_none());
    }
}
