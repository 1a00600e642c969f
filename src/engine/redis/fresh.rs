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
//! Redis Cluster is not gated (no single link and `run_id`): see docs/SCALE_OUT.md.

use std::sync::Weak;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use redis::Script;

use super::conn::RedisConn;
use super::keys::Keys;
use super::ScaleOut;

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
    /// Compares every campaign's numbering in Redis with the ledger's and rebuilds each one
    /// that is behind.
    pub async fn check_freshness(&self) -> anyhow::Result<Checked> {
        let started = Instant::now();
        let high = self.ledger.high_water().await?;
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
        let drop = Script::new(include_str!("lua/drop_stale.lua"));
        // Several at once: claims wait for all of them.
        let rebuilt = futures::stream::iter(behind)
            .map(|(id, ledger_seq, seq, force)| {
                let (drop, mut conn) = (&drop, self.conn());
                let orders = resolved.get(&id).cloned().unwrap_or_default();
                async move {
                    let k = Keys::new(&id);
                    let dropped: i64 = drop
                        .key(k.meta())
                        .key(k.seq())
                        .key(k.orders())
                        .key(k.held())
                        .arg(ledger_seq)
                        .arg(if force { "1" } else { "0" })
                        .arg(orders)
                        .invoke_async(&mut conn)
                        .await?;
                    match dropped {
                        1 => tracing::error!(
                            campaign = %id,
                            redis_seq = seq,
                            ledger_seq,
                            "Redis is behind the ledger (restored from an older snapshot, or a \
                             lagging replica took over): rebuilding the campaign from the ledger \
                             before serving it"
                        ),
                        2 => {
                            tracing::error!(
                                campaign = %id,
                                redis_seq = seq,
                                ledger_seq,
                                "Redis is behind the ledger and its stream still holds orders \
                                 the ledger may not have: the campaign is fenced (claims answer \
                                 503) until the pipeline has drained its stream into the ledger \
                                 and rebuilt it"
                            );
                            return anyhow::Ok(1);
                        }
                        _ => {}
                    }
                    self.reconcile(&id)
                        .await
                        .map_err(|e| anyhow::anyhow!("rebuilding campaign {id}: {e}"))?;
                    anyhow::Ok(usize::from(dropped == 1))
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
        let unnumbered: Vec<String> = self
            .ledger
            .campaign_ids()
            .await?
            .into_iter()
            .filter(|id| !with_orders.contains(id.as_str()))
            .collect();
        level.extend(unnumbered);
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
