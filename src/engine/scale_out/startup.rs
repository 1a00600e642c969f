//! Opening the scale-out engine, and the start-up reconcile: every *live* campaign of the
//! ledger brought level in Redis, and every pending order past its `pay_by` expired, before the
//! instance serves; the reconcile runs under a lease.
//!
//! Several instances often start together (a deploy, a restart of the fleet). Each would
//! otherwise walk every campaign and rewrite the same gate keys at once; under the lease
//! [`RECONCILE_JOB`] they take turns, and the fence of the last run is kept in PostgreSQL's
//! `job_fences` (refusing an older holder), so a paused instance cannot redo it behind a
//! newer one.
//!
//! Only live campaigns are rebuilt before serving. A dormant one (closed or past its
//! `ends_at`, with no pending order: `PgLedger::campaign_liveness`) can sell nothing, yet
//! rebuilding it costs one Redis write per buyer it ever had, so after Redis lost everything a
//! restart paid for every order ever sold. Before serving, a dormant campaign Redis still has
//! only takes the ledger's status (one script call: a gate from an older snapshot may still
//! say `active` for a campaign the ledger closed, and must never sell from it); one Redis lacks
//! stays absent. The freshness check that follows drops a dormant gate whose numbering is
//! behind and does not rebuild it; the catch-up task levels the dormant gates Redis still has
//! after the instance serves (`fresh.rs`, `catch_up.rs`). A dormant campaign Redis lacks stays
//! out of Redis: its views and claims are answered from the ledger, and only a keyed claim it
//! would answer `paused` or an admin change that needs its buyers rebuilds it (`dormant.rs`).

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};

use super::{
    catch_up, fresh, holds, settings, stock, BatchOptions, Batcher, RedisConn, RedisLimiter,
    RedisTarget, ScaleOut, Scripts,
};
use crate::ledger::PgLedger;
use crate::supervise::Supervisor;

/// Settings of the scale-out deployment.
#[derive(Debug, Clone)]
pub struct ScaleOutOptions {
    pub redis: RedisTarget,
    pub postgres: String,
    /// Connections of this process to PostgreSQL.
    pub pg_connections: u32,
    pub idempotency_ttl: Duration,
    /// Retention and caps of the answers of claims that changed nothing.
    pub idempotency_limits: crate::engine::IdemLimits,
    /// Supervised tasks of this process, beside the engine's own, without which claims are
    /// refused (see [`DEPENDENCY_GRACE`](super::DEPENDENCY_GRACE)): the order pipeline when it runs in this process.
    pub claims_depend_on: Vec<&'static str>,
    /// Longest a stale "sold out" outlives a restock whose announcement was lost.
    pub stock_max_staleness: Duration,
    /// Serve even though Redis may evict keys (`--allow-redis-eviction`).
    pub allow_redis_eviction: bool,
    /// How concurrent claims on one campaign are gathered into one script call.
    pub claim_batch: BatchOptions,
}

/// The lock (and `job_fences` row) of the start-up reconcile.
pub const RECONCILE_JOB: &str = "seckill-startup-reconcile";

/// Lease of one reconcile run, extended in the background while it lasts.
const LEASE: Duration = Duration::from_secs(30);

/// Dormant campaigns given the ledger's status concurrently by the start-up reconcile.
const AT_ONCE: usize = 16;

/// Reconciles every live campaign of the ledger and gives every dormant one Redis has the
/// ledger's status, one instance at a time.
pub(super) async fn reconcile_live(me: &Arc<ScaleOut>) -> anyhow::Result<()> {
    let owner = format!("seckill-{}", std::process::id());
    crate::lock::singleton::run_once(
        &me.locks,
        me.ledger.pool(),
        RECONCILE_JOB,
        &owner,
        LEASE,
        |_fence| async {
            let started = std::time::Instant::now();
            let campaigns = me
                .ledger
                .campaign_liveness(me.dormancy_now().await?)
                .await?;
            for id in &campaigns.live {
                me.reconcile(id).await.map_err(|e| {
                    anyhow::anyhow!("bringing campaign {id} level with the ledger: {e}")
                })?;
            }
            futures::stream::iter(&campaigns.dormant)
                .map(|id| async move {
                    me.sync_status_or_install(id, false).await.map_err(|e| {
                        anyhow::anyhow!("giving dormant campaign {id} the ledger's status: {e}")
                    })
                })
                .buffer_unordered(AT_ONCE)
                .try_collect::<Vec<()>>()
                .await?;
            tracing::info!(
                live = campaigns.live.len(),
                dormant = campaigns.dormant.len(),
                took_ms = started.elapsed().as_millis() as u64,
                "live campaigns reconciled; dormant ones only status-synced before serving"
            );
            anyhow::Ok(())
        },
    )
    .await
}

impl ScaleOut {
    /// Connects to Redis and PostgreSQL, migrates the ledger, loads the scripts and brings the
    /// gate level with the ledger. Its background tasks run under `supervisor`; the order
    /// pipeline is not started here (`crate::app` starts it beside the engine, and names it
    /// in `opts.claims_depend_on`).
    pub async fn open(
        opts: ScaleOutOptions,
        supervisor: &Arc<Supervisor>,
    ) -> anyhow::Result<Arc<Self>> {
        let ledger = Arc::new(PgLedger::open(&opts.postgres, opts.pg_connections).await?);
        let mut redis = RedisConn::connect(&opts.redis).await?;
        let settings = Arc::new(settings::Watch::start(&redis, opts.allow_redis_eviction).await?);
        let scripts = Arc::new(Scripts::default());
        scripts.load(&mut redis).await?;
        let limiter = Arc::new(RedisLimiter::new(redis.clone()));
        limiter.load().await?;
        let stock = stock::StockKeeper::new(redis.clone());
        let supervisor = supervisor.clone();
        let mut claim_depends = vec![stock::REFRESHER];
        claim_depends.extend(opts.claims_depend_on.iter().copied());
        stock.supervise(&supervisor, opts.stock_max_staleness, &opts.redis);
        let (conn, watch) = (redis.clone(), Arc::downgrade(&settings));
        supervisor.spawn("redis-settings", move |_| {
            settings::recheck_loop(conn.clone(), watch.clone())
        });
        let idem_ttl_secs = opts.idempotency_ttl.as_secs().max(24 * 3600);
        let claims = Batcher::new(
            redis.gated(),
            scripts.clone(),
            opts.claim_batch,
            (idem_ttl_secs, opts.idempotency_limits),
            super::refuse::CLAIM_TIMEOUT,
        );
        let locks =
            crate::lock::Locks::new(Arc::new(crate::lock::redis::RedisLocks::new(redis.clone())));
        let me = Arc::new_cyclic(|me| Self {
            claims,
            redis,
            ledger: ledger.clone(),
            scripts: scripts.clone(),
            supervisor: supervisor.clone(),
            settings,
            claim_depends,
            limiter,
            stock,
            behind: catch_up::Behind::default(),
            locks,
            hold_stats: Default::default(),
            pending_units: Default::default(),
            lineage: Default::default(),
            rooms: Default::default(),
            me: me.clone(),
        });
        // Instances starting together reconcile one after the other, under a lease. Dormant
        // campaigns are not rebuilt (module docs).
        reconcile_live(&me).await?;
        let seen = me.check_and_open().await?;
        // Orders whose pay_by passed while no instance was sweeping go back before this one
        // serves its first request.
        let expired = me
            .sweep()
            .await
            .map_err(|e| anyhow::anyhow!("expiring overdue pending orders: {e}"))?;
        if expired > 0 {
            tracing::warn!(expired, "pending orders past their pay_by expired at start");
        }
        let weak = Arc::downgrade(&me);
        supervisor.spawn(holds::TASK, move |_| holds::sweep_loop(weak.clone()));
        let weak = Arc::downgrade(&me);
        supervisor.spawn(catch_up::TASK, move |_| catch_up::run(weak.clone()));
        let weak = Arc::downgrade(&me);
        // A restarted checker checks again from scratch.
        let seen = parking_lot::Mutex::new(seen);
        supervisor.spawn(fresh::TASK, move |_| {
            fresh::watch_loop(weak.clone(), seen.lock().take())
        });
        Ok(me)
    }
}
