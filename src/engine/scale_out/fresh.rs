//! Never serve claims from a Redis that is behind the ledger.
//!
//! Redis restarted from an older RDB snapshot, or a replica that missed the last writes taking
//! over, holds campaigns whose order numbering is behind what PostgreSQL already stores: its
//! claim script would hand out order ids the ledger holds for earlier buyers (those wins are
//! then never written) and let buyers whose orders it forgot buy again. So claims go through
//! a *gated* connection (`conn.rs`) that sends them only on a link generation this instance
//! checked: after every (re)connect, and whenever Redis's `run_id` changes (a replaced server
//! behind the same address), every campaign's numbering in Redis is compared with the
//! ledger's high-water mark (the highest order number in PostgreSQL; the stream may carry
//! more, which only puts Redis ahead, never behind). Each campaign that is behind is taken out
//! of service by `lua/drop_stale.lua` (guarded on the numbering, so a gate another instance
//! already rebuilt is left alone): dropped and rebuilt from the ledger at once when its stream
//! is empty, or fenced when the stream still holds orders (a consumer read them and died, and
//! the old snapshot kept them), so that the pipeline writes them into the ledger before it
//! rebuilds the gate: a rebuild from the ledger alone would sell their units and codes again
//! and let their buyers win twice. Only then are claims let through. Meanwhile claims answer
//! 503 "nothing was changed". The hot path pays one atomic load (`Link::request_gated`).
//!
//! A dormant campaign (closed or ended, nothing pending: it can sell nothing) is compared and
//! taken out of service like any other, but not rebuilt: its rebuild writes every buyer it
//! ever had, so it is answered from the ledger until a change needs its buyers (`dormant.rs`),
//! and a Redis that lost everything serves its live campaigns at once.
//!
//! A Redis Cluster has no single link and `run_id`: there each campaign is checked on its
//! own, on the replication lineage of the node serving it (`lineage.rs`).

use std::sync::Weak;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;

use super::keys::Keys;
use super::ScaleOut;
use crate::redis_conn::RedisConn;

/// The supervised task name of the checker.
pub const TASK: &str = "redis-freshness";

/// How often the `run_id` of a connected Redis is re-read.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Campaigns rebuilt concurrently by one check.
const REBUILDS_AT_ONCE: usize = 16;

/// What one check found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Checked {
    pub campaigns: usize,
    pub rebuilt: usize,
    pub took: Duration,
}

impl ScaleOut {
    /// Those of `ids` whose gate held (when read) pending orders the ledger has already
    /// resolved, with those orders.
    async fn resolved_in_ledger(
        &self,
        ids: &[String],
    ) -> anyhow::Result<std::collections::HashMap<String, Vec<String>>> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hkeys(Keys::new(id).held());
        }
        let held: Vec<Vec<String>> = pipe.query_async(&mut self.conn()).await?;
        let pending: Vec<String> = held.into_iter().flatten().collect();
        let mut by_campaign: std::collections::HashMap<String, Vec<String>> = Default::default();
        for order in self.ledger.resolved_among(&pending).await? {
            if let Ok((campaign, _)) = crate::domain::parse_order_id(&order) {
                by_campaign
                    .entry(campaign.to_owned())
                    .or_default()
                    .push(order);
            }
        }
        Ok(by_campaign)
    }
}

/// What `lua/drop_stale.lua` did to a campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OutOfService {
    /// Nothing: the gate is level (or was rebuilt meanwhile), or the campaign is gone.
    Kept,
    /// Deleted, to be rebuilt from the ledger.
    Dropped,
    /// Fenced until the pipeline drained its stream into the ledger and rebuilt it.
    Fenced,
}

impl ScaleOut {
    /// Takes campaign `id`, whose gate is behind the ledger (`(seq, ledger_seq)`: the gate's
    /// and the ledger's numbering), or holds pending the ledger's resolved `orders` (`force`),
    /// out of service (`lua/drop_stale.lua`), saying so in the log.
    pub(super) async fn take_out_of_service(
        &self,
        id: &str,
        (seq, ledger_seq): (u64, u64),
        force: bool,
        orders: Vec<String>,
    ) -> anyhow::Result<OutOfService> {
        let k = Keys::new(id);
        let dropped: i64 = self
            .scripts
            .drop_stale
            .key(k.meta())
            .key(k.seq())
            .key(k.orders())
            .key(k.held())
            .arg(ledger_seq)
            .arg(if force { "1" } else { "0" })
            .arg(orders)
            .invoke_async(&mut self.conn())
            .await?;
        Ok(match dropped {
            1 => {
                tracing::error!(
                    campaign = %id,
                    redis_seq = seq,
                    ledger_seq,
                    "Redis is behind the ledger (restored from an older snapshot, or a lagging \
                     replica took over): rebuilding the campaign from the ledger before serving it"
                );
                OutOfService::Dropped
            }
            2 => {
                tracing::error!(
                    campaign = %id,
                    redis_seq = seq,
                    ledger_seq,
                    "Redis is behind the ledger and its stream still holds orders the ledger may \
                     not have: the campaign is fenced (claims answer 503) until the pipeline has \
                     drained its stream into the ledger and rebuilt it"
                );
                OutOfService::Fenced
            }
            _ => OutOfService::Kept,
        })
    }
}

async fn run_id(conn: &RedisConn) -> anyhow::Result<String> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn.clone())
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|v| v.trim().to_owned())
        .context("INFO server has no run_id")
}

impl ScaleOut {
    /// Gives each of `stopped` (paused or closed by the ledger) whose gate says `active` the
    /// ledger's status: one pipelined read of every such gate's status, one script call per
    /// gate that differs.
    async fn stop_what_the_ledger_stopped(&self, stopped: &[String]) -> anyhow::Result<()> {
        if stopped.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for id in stopped {
            pipe.hget(Keys::new(id).meta(), "status");
        }
        let gate: Vec<Option<String>> = pipe.query_async(&mut self.conn()).await?;
        let selling: Vec<String> = stopped
            .iter()
            .zip(gate)
            .filter(|(_, s)| s.as_deref() == Some("active"))
            .map(|(id, _)| id.clone())
            .collect();
        futures::stream::iter(selling)
            .map(|id| async move {
                self.sync_status_or_install(&id, false)
                    .await
                    .map_err(|e| anyhow::anyhow!("giving campaign {id} the ledger's status: {e}"))
            })
            .buffer_unordered(REBUILDS_AT_ONCE)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<anyhow::Result<Vec<()>>>()?;
        Ok(())
    }

    /// Compares every campaign's numbering in Redis with the ledger's and rebuilds each one
    /// that is behind.
    pub async fn check_freshness(&self) -> anyhow::Result<Checked> {
        let started = Instant::now();
        let high = self.ledger.high_water().await?;
        let campaigns = self
            .ledger
            .campaign_liveness(self.dormancy_now().await?)
            .await?;
        let dormant: std::collections::HashSet<&str> =
            campaigns.dormant.iter().map(String::as_str).collect();
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        for (id, _) in &high {
            pipe.get(Keys::new(id).seq());
        }
        let seqs: Vec<Option<u64>> = if high.is_empty() {
            Vec::new()
        } else {
            pipe.query_async(&mut conn).await?
        };
        let (mut behind, level): (Vec<_>, Vec<_>) = high
            .iter()
            .zip(seqs)
            .map(|((id, ledger_seq), seq)| (id.clone(), *ledger_seq, seq.unwrap_or(0), false))
            .partition(|(_, ledger_seq, seq, _)| seq < ledger_seq);
        // Level numbering is not enough: a Redis back from a snapshot taken while an order was
        // pending still holds it pending after the ledger saw it confirmed or expired (it would
        // expire it again and sell its unit and code twice).
        let ids: Vec<String> = level.iter().map(|(id, ..)| id.clone()).collect();
        let resolved = self.resolved_in_ledger(&ids).await?;
        let (forced, level): (Vec<_>, Vec<_>) = level
            .into_iter()
            .partition(|(id, ..)| resolved.contains_key(id));
        behind.extend(forced.into_iter().map(|(id, l, s, _)| (id, l, s, true)));
        // Several at once: claims wait for all of them. A dormant campaign is only taken out
        // of service (it can sell nothing, and absent it is answered from the ledger until a
        // change needs its buyers, dormant.rs): no rebuild, one write per buyer it ever had.
        let later = parking_lot::Mutex::new(Vec::new());
        let rebuilt = futures::stream::iter(behind)
            .map(|(id, ledger_seq, seq, force)| {
                let orders = resolved.get(&id).cloned().unwrap_or_default();
                let later = &later;
                let dormant = dormant.contains(id.as_str());
                async move {
                    let dropped = self
                        .take_out_of_service(&id, (seq, ledger_seq), force, orders)
                        .await?;
                    if dropped == OutOfService::Fenced {
                        return anyhow::Ok(1);
                    }
                    if dormant {
                        later.lock().push(id);
                        return anyhow::Ok(usize::from(dropped == OutOfService::Dropped));
                    }
                    self.reconcile(&id)
                        .await
                        .map_err(|e| anyhow::anyhow!("rebuilding campaign {id}: {e}"))?;
                    anyhow::Ok(usize::from(dropped == OutOfService::Dropped))
                }
            })
            .buffer_unordered(REBUILDS_AT_ONCE)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .sum::<anyhow::Result<usize>>()?;
        // The campaigns left in service take the admin changes the ledger has and a gate from
        // an old snapshot may not: restocks, status, releases of cancelled orders (each
        // idempotent; before, they waited for a restart while units stayed unsold). The
        // catch-up task does it in the background, retrying each campaign until it succeeds:
        // claims need not wait for it, and one campaign that fails holds up no other.
        let mut level: Vec<String> = level.into_iter().map(|(id, ..)| id).collect();
        let with_orders: std::collections::HashSet<&str> =
            high.iter().map(|(id, _)| id.as_str()).collect();
        let unnumbered = (campaigns.live.iter())
            .chain(&campaigns.dormant)
            .filter(|id| !with_orders.contains(id.as_str()))
            .cloned();
        level.extend(unnumbered);
        // Except the status, before claims are let through: a gate from an older snapshot
        // may say `active` for a campaign the ledger has paused or closed since.
        self.stop_what_the_ledger_stopped(&campaigns.stopped)
            .await?;
        level.extend(later.into_inner());
        for id in level {
            self.behind.add(id);
        }
        Ok(Checked {
            campaigns: high.len(),
            rebuilt,
            took: started.elapsed(),
        })
    }

    /// Checks the Redis behind the current link generation and opens the claim gate on it.
    /// Returns the `run_id` and generation it checked, or `None` if the link moved on meanwhile.
    pub(super) async fn check_and_open(&self) -> anyhow::Result<Option<(String, u64)>> {
        let Some(link) = self.redis.link() else {
            return Ok(None);
        };
        let health = link.health();
        if !health.up {
            return Ok(None);
        }
        let id = run_id(&self.redis).await?;
        let checked = self.check_freshness().await?;
        if !link.verify(health.generation) {
            return Ok(None);
        }
        let level = |c: &Checked| c.rebuilt == 0;
        if level(&checked) {
            tracing::info!(run_id = %id, campaigns = checked.campaigns, took_ms = checked.took.as_millis() as u64, "Redis checked against the ledger; serving claims");
        } else {
            tracing::warn!(run_id = %id, campaigns = checked.campaigns, rebuilt = checked.rebuilt, took_ms = checked.took.as_millis() as u64, "Redis was behind the ledger; campaigns rebuilt, serving claims");
        }
        Ok(Some((id, health.generation)))
    }
}

/// Re-checks after every reconnect and whenever the `run_id` changes, until the engine is
/// dropped. Claims stay refused from a reconnect until its check finished.
pub async fn watch_loop(me: Weak<ScaleOut>, mut seen: Option<(String, u64)>) -> anyhow::Result<()> {
    let Some(mut changes) = me.upgrade().and_then(|m| m.redis.watch()) else {
        return Ok(());
    };
    loop {
        let Some(engine) = me.upgrade() else {
            return Ok(());
        };
        let Some(link) = engine.redis.link().cloned() else {
            return Ok(());
        };
        let health = link.health();
        let current = if health.up {
            run_id(&engine.redis).await.ok()
        } else {
            None
        };
        let stale = match (&seen, &current) {
            (Some((id, g)), Some(now)) => *g != health.generation || id != now,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        if stale {
            link.unverify();
            match engine.check_and_open().await {
                Ok(Some(s)) => seen = Some(s),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "checking Redis against the ledger failed; claims stay refused, retrying");
                }
            }
        }
        drop(engine);
        if seen
            .as_ref()
            .is_some_and(|(_, g)| *g == link.health().generation)
        {
            tokio::select! {
                _ = tokio::time::sleep(RECHECK) => {}
                _ = changes.changed() => {}
            }
        } else {
            // Not checked yet (failed, or the link moved on): retry soon.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
