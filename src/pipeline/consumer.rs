//! One consumer of the order streams: read, insert in one transaction, acknowledge.
//!
//! [`Consumer::step`] is one pass over every campaign's stream, callable on its own from
//! tests: entries another consumer has held longer than `reclaim_after` (it crashed:
//! XAUTOCLAIM) — only by the one consumer holding the reclaim lease, in a transaction of their
//! own that carries the lease's fence (see [`reclaim`]) —, entries this consumer already holds
//! (after a failure or a restart under the same name), then new ones (XREADGROUP `>`), which
//! never wait on the lease. The entries go to PostgreSQL in one transaction, in stream order
//! (`PgLedger::apply_pipeline`): new orders with `ON CONFLICT DO NOTHING` on the order id, so an
//! entry delivered twice is harmless, and transitions of pending orders (campaigns with holds)
//! as self-contained upserts (`ledger/postgres/holds.rs`; a transition the ledger contradicts
//! is recorded and acknowledged, `consumer/holds.rs`); the entries are acknowledged and deleted
//! only after the commit. If PostgreSQL is
//! unreachable nothing is acknowledged: the streams buffer, and the next step retries.
//! An entry PostgreSQL refuses for its data (a constraint, a bad value) is poison: it is
//! recorded in `failed_orders`, its units, codes and allowance go back in Redis, and it is
//! acknowledged — compensated and recorded, never dropped silently.
//!
//! `ON CONFLICT DO NOTHING` absorbs only a replay of the very same order. An order whose id the
//! ledger holds for a *different* order means the gate lost state (Redis restored from an older
//! snapshot, a lagging replica promoted): the campaign is fenced at once (`fence.lua`: its
//! claims answer 503 "nothing was changed"), every buyer told `won` for a reissued id is
//! recorded in `failed_orders` (one log line per incident), and once the campaign's stream is
//! drained its gate is rebuilt from the ledger and claims resume. Any consumer finishes a
//! fence another one left (it crashed), so a fence never outlives the pipeline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::streams::{StreamId, StreamReadReply};

use super::entry::Entry;
use super::PipelineOptions;
use crate::engine::scale_out::{Health, Keys, RedisConn, Scripts, WaitReplicas, GROUP};
use crate::ledger::{is_data_error, PgLedger, PipelineOutcome, PipelineWrite};

/// What one step did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub read: usize,
    pub persisted: usize,
    pub poisoned: usize,
}

pub struct Consumer {
    conn: RedisConn,
    ledger: Arc<PgLedger>,
    scripts: Arc<Scripts>,
    opts: PipelineOptions,
    campaigns: Vec<String>,
    refreshed: Option<Instant>,
    reclaimed: Option<Instant>,
    /// Re-read this consumer's own unacknowledged entries before taking new ones.
    recheck_own: bool,
    /// Fenced campaigns waiting for their stream to drain before their gate is rebuilt.
    fenced: std::collections::BTreeSet<String>,
    /// The reclaim lease, when this consumer holds it.
    reclaim: reclaim::Reclaim,
    /// The Redis link when this step started reading (`--redis-wait-replicas`).
    read_on: Option<Health>,
    /// Entries the ledger refused while older ones of their campaign were unhandled, since when
    /// (`rules`): past a bound a refusal is recorded, whatever is still older.
    deferred_since: HashMap<(String, String), Instant>,
    /// Orders per stream entry in the last read (a batch entry of `claims.lua` holds many),
    /// so that a step reads about `--pipeline-batch` orders, not as many batch entries.
    per_entry: usize,
    /// Stream entries never to acknowledge: read from a Redis Cluster node the campaign has
    /// left, they are not in the stream of the node serving it, where an entry of the same id
    /// may be waiting (`lost`).
    not_here: std::collections::HashSet<(String, String)>,
    /// The highest order number of each campaign the ledger took from this consumer and not
    /// yet checked against the gate's numbering (`fence.rs`, [`Consumer::check_numbering`]).
    unchecked: std::collections::BTreeMap<String, u64>,
}

const REFRESH_EVERY: Duration = Duration::from_millis(500);

fn is_nogroup(e: &redis::RedisError) -> bool {
    e.code() == Some("NOGROUP")
}

mod ack;
mod fence;
mod holds;
mod isolate;
mod lost;
mod poison;
mod reclaim;
mod rules;

/// How long a consumer waits before it tries an order the ledger refused again while older
/// entries of its campaign were unhandled (`rules`).
const DEFERRED_PAUSE: Duration = Duration::from_millis(100);

/// Counts an order the pipeline could not write as won (`reason`: poison, reissued,
/// contradiction, ledger_rule, lost).
fn refused_metric(reason: &'static str) {
    metrics::counter!(crate::telemetry::catalog::PIPELINE_REFUSED, "reason" => reason).increment(1);
}

pub use reclaim::RECLAIM_JOB;

/// The `failed_orders.reason` of a buyer told `won` for an order id the ledger already holds
/// for another order (Redis lost acknowledged writes and issued the id again).
pub const REISSUED: &str = "the ledger already holds a different order under this id: Redis \
                            lost acknowledged writes (restored from an older snapshot, or a \
                            lagging replica took over)";

/// The `failed_orders.reason` of an entry read from a Redis Cluster node its campaign has
/// left, that the node serving it now never had (`ledger/postgres/lineage.rs`).
pub const LOST: &str = "read from a Redis Cluster node before a failover that lost it: the \
                        replica promoted in its place never had it, and the campaign was \
                        checked against the ledger without it";

/// How a `failed_orders.reason` of an order a ledger rule refused begins.
pub const LEDGER_RULE: &str = "the ledger refused it (";

impl Consumer {
    /// A consumer on its own Redis connection (`conn` must not be shared with the claim path).
    pub fn new(
        conn: RedisConn,
        ledger: Arc<PgLedger>,
        scripts: Arc<Scripts>,
        opts: PipelineOptions,
    ) -> Self {
        let reclaim = reclaim::Reclaim::new(&conn);
        Self {
            conn,
            ledger,
            scripts,
            opts,
            campaigns: Vec::new(),
            refreshed: None,
            reclaimed: None,
            recheck_own: true,
            fenced: Default::default(),
            reclaim,
            read_on: None,
            deferred_since: HashMap::new(),
            per_entry: 1,
            not_here: Default::default(),
            unchecked: Default::default(),
        }
    }

    /// Makes the next step re-read this consumer's unacknowledged entries first (after a step
    /// was abandoned half-way).
    pub fn recheck_own(&mut self) {
        self.recheck_own = true;
    }

    /// Reachability changes of this consumer's Redis connection (`None` for a cluster).
    pub fn redis_watch(
        &self,
    ) -> Option<tokio::sync::watch::Receiver<crate::engine::scale_out::Health>> {
        self.conn.watch()
    }

    pub fn name(&self) -> &str {
        &self.opts.consumer
    }

    /// Releases the reclaim lease if this consumer holds it (on shutdown).
    pub async fn release_lease(&mut self) {
        self.reclaim.release().await;
    }

    /// Refreshes the campaign list from the ledger; keeps the last one if it is unreachable.
    async fn refresh(&mut self) {
        if self.refreshed.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return;
        }
        match self.ledger.campaign_ids().await {
            Ok(ids) => {
                self.campaigns = ids;
                self.refreshed = Some(Instant::now());
                if let Err(e) = self.adopt_fences().await {
                    tracing::debug!(error = %format!("{e:#}"), "cannot look for fenced campaigns");
                }
            }
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "cannot list campaigns; using the last list")
            }
        }
    }

    /// One pass: gather up to `batch` entries, persist them, acknowledge what is done.
    pub async fn step(&mut self) -> anyhow::Result<Step> {
        self.read_on = WaitReplicas::before(&self.conn);
        self.refresh().await;
        let mut reclaimed = Step::default();
        if self
            .reclaimed
            .is_none_or(|t| t.elapsed() >= self.reclaim_every())
        {
            self.reclaimed = Some(Instant::now());
            reclaimed = self.reclaim_step().await?;
        }
        let mut entries = Vec::new();
        // Own unacknowledged entries first when asked, then new ones in the room left: an
        // entry that waits for an older one (`rules`) stays this consumer's own, and must not
        // keep it from every other campaign's new orders.
        for own in [true, false] {
            if own && !self.recheck_own {
                continue;
            }
            let before = entries.len();
            for id in self.campaigns.clone() {
                let room = self.opts.batch.saturating_sub(entries.len());
                if room == 0 {
                    break;
                }
                match self.gather(&id, room, own).await {
                    Ok(mut e) => entries.append(&mut e),
                    Err(e) if is_nogroup(&e) => continue,
                    Err(e) => {
                        self.recheck_own = true;
                        return Err(e.into());
                    }
                }
            }
            if own && entries.len() == before {
                self.recheck_own = false;
            }
        }
        let step = self.process(entries, None).await;
        if step.is_err() {
            self.recheck_own = true;
        }
        self.check_numbering().await;
        self.rebuild_fenced().await?;
        step.map(|s| Step {
            read: s.read + reclaimed.read,
            persisted: s.persisted + reclaimed.persisted,
            poisoned: s.poisoned + reclaimed.poisoned,
        })
    }

    async fn gather(&mut self, id: &str, room: usize, own: bool) -> redis::RedisResult<Vec<Entry>> {
        let stream = Keys::new(id).orders();
        let mut out = Vec::new();
        let wrap = |s: StreamId| Entry::new(id.to_owned(), s.id, s.map);
        if room > 0 {
            let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(&self.opts.consumer)
                .arg("COUNT")
                .arg(room.div_ceil(self.per_entry))
                .arg("STREAMS")
                .arg(&stream)
                .arg(if own { "0" } else { ">" })
                .query_async(&mut self.conn)
                .await?;
            for key in reply.map(|r| r.keys).unwrap_or_default() {
                let read: Vec<StreamId> =
                    key.ids.into_iter().filter(|s| !s.map.is_empty()).collect();
                let n = read.len();
                out.extend(read.into_iter().flat_map(|s| wrap(s).expand()));
                if let Some(per) = out.len().checked_div(n) {
                    self.per_entry = per.max(1);
                }
            }
        }
        Ok(out)
    }

    /// Persists `entries` and acknowledges them; with `fence`, every transaction that inserts
    /// them first records the fence of the reclaim lease ([`RECLAIM_JOB`]).
    async fn process(&mut self, entries: Vec<Entry>, fence: Option<u64>) -> anyhow::Result<Step> {
        let fence = fence.map(|f| (RECLAIM_JOB, f));
        let mut step = Step {
            read: entries.len(),
            ..Step::default()
        };
        // The entries that parsed, and beside them (same index) what each asks of the ledger.
        let mut good: Vec<Entry> = Vec::with_capacity(entries.len());
        let mut writes: Vec<PipelineWrite> = Vec::with_capacity(entries.len());
        let mut poisoned = Vec::new();
        for e in entries {
            match e.write() {
                Ok(w) => {
                    good.push(e);
                    writes.push(w);
                }
                Err(why) => {
                    self.poison(&e, None, &format!("{why:#}")).await?;
                    // What it holds cannot be read, so nothing can be given back one by one:
                    // the campaign is rebuilt from the ledger once its stream is drained, which
                    // gives back whatever the entry's orders took.
                    self.fence_campaign(&e.campaign_id).await?;
                    step.poisoned += 1;
                    poisoned.push(e);
                }
            }
        }
        // A stream entry is acknowledged once every order it carries is handled: a poisoned
        // one alone now, one with orders still to write together with them.
        let pending: std::collections::HashSet<(&str, &str)> =
            good.iter().map(Entry::key).collect();
        let (poisoned, alone): (Vec<Entry>, Vec<Entry>) = poisoned
            .into_iter()
            .partition(|e| pending.contains(&e.key()));
        self.ack(&alone).await?;
        if good.is_empty() {
            return Ok(step);
        }
        if let Some(w) = self.opts.replicas {
            // A demoted primary's orders never reach a replica, so never the ledger either.
            w.confirm(&self.conn, self.read_on).await.map_err(|e| {
                e.context("the orders are not on a replica yet; they stay in the stream")
            })?;
        }
        let m = crate::telemetry::process::handles();
        m.pipeline_batch.record(writes.len() as f64);
        // Noted before the commit: a step dropped while it commits (its timeout) must not
        // forget what the ledger may have taken.
        self.note_numbers(&writes);
        let applied = {
            let _t = crate::telemetry::process::Timer::start(&m.pipeline_insert);
            let origins: Vec<_> = good.iter().map(Entry::origin).collect();
            self.ledger.apply_read(&writes, &origins, fence).await
        };
        match applied {
            // The test hook of `crate::supervise`: die after the commit, before the ack.
            Ok(_) if crate::supervise::test_panic(super::TASK) => {
                panic!("test hook: the pipeline dies between commit and acknowledgement")
            }
            Ok(out) => {
                self.applied(&good, &writes, &out, &mut step).await?;
                self.deferred_since.clear();
            }
            Err(e) if is_data_error(&e) => {
                // Somewhere in the batch is an entry PostgreSQL refuses: find it alone
                // (`isolate`). Entries that wait for older ones of their campaign stay with this
                // consumer and are read again first, after a pause; the rest is acknowledged.
                if let Some(waiting) = self.isolate(&good, &writes, fence, &mut step).await? {
                    let done = |e: &&Entry| {
                        !waiting.contains(&(e.campaign_id.clone(), e.stream_id.clone()))
                    };
                    self.ack(good.iter().filter(done).chain(poisoned.iter().filter(done)))
                        .await?;
                    self.recheck_own = true;
                    tokio::time::sleep(DEFERRED_PAUSE).await;
                    return Ok(step);
                }
            }
            Err(e) => {
                return Err(e.context("the ledger did not take the orders; they stay in the stream"))
            }
        }
        // Every order of these entries is in the ledger or recorded as poison.
        self.ack(good.iter().chain(&poisoned)).await?;
        Ok(step)
    }

    /// Counts what a committed batch of `good` did into `step`, handling what it refused.
    async fn applied(
        &mut self,
        good: &[Entry],
        writes: &[PipelineWrite],
        out: &PipelineOutcome,
        step: &mut Step,
    ) -> anyhow::Result<()> {
        let refused = self.refused(good, writes, out).await?;
        step.persisted += good.len() - refused;
        step.poisoned += refused;
        Ok(())
    }

    /// Handles what a committed batch refused (reissued order ids, contradicting transitions);
    /// returns how many entries that was.
    async fn refused(
        &mut self,
        good: &[Entry],
        writes: &[PipelineWrite],
        out: &PipelineOutcome,
    ) -> anyhow::Result<usize> {
        self.collisions(good, writes, &out.collisions).await?;
        self.contradictions(good, writes, &out.contradictions)
            .await?;
        self.lost(good, writes, &out.lost).await?;
        for &i in &out.not_here {
            self.not_here
                .insert((good[i].campaign_id.clone(), good[i].stream_id.clone()));
        }
        Ok(out.collisions.len() + out.contradictions.len() + out.lost.len())
    }
}
