//! The embedded deployment: per-campaign state in process, SQLite ledger, group commit.
//!
//! Each campaign has its own `parking_lot` mutex; a claim locks only its campaign, runs the
//! atomic step of [`CampaignState::decide`](crate::engine::state::CampaignState::decide), and — still under the lock, so ledger order equals
//! decision order — submits the order to the group commit. The lock is released before any
//! waiting. The answer is sent only after the commit; if it fails, the commit callback gives the
//! units back and the client gets 503. Admin operations additionally take a per-campaign async
//! mutex so they never interleave with each other, and run on their own task so a client that
//! disconnects cannot stop one between its commit and its in-memory change.
//!
//! Every change of a campaign's stock or status is published to the guard's stock board
//! under the same lock, before the operation answers (see `guard::soldout`).
//!
//! The module is split by concept: `cell` (one campaign's locked state), `claim` (the claim
//! path), `admin` (create, restock, status, limits), `holds` (cancel and the expiry of
//! pending orders), `confirm` (confirms of pending orders, batched per campaign), `recover`
//! (every cell rebuilt from the ledger at start) and `upkeep` (idempotency pruning and the
//! in-process recovery after a commit of unknown outcome).

mod admin;
mod cell;
mod claim;
mod confirm;
mod holds;
mod recover;
mod upkeep;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::RwLock;

use self::cell::CampaignCell;
use super::idempotency::IdemLimits;
use crate::clock::Clock;
use crate::domain::{
    parse_order_id, AdminKey, CampaignLimits, CampaignView, ClaimAnswer, ClaimRequest, Error,
    IdempotencyKey, NewCampaign, Order, OrderPage, OrderQuery, Restock, Status,
};
use crate::engine::backend::Backend;
use crate::engine::idempotency::commit_failed;
use crate::guard::soldout::StockBoard;
use crate::ledger::{GroupCommit, Ledger, SqliteLedger, WriterHealth};
use crate::supervise::Supervisor;

/// Settings of the embedded deployment.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    pub data_dir: PathBuf,
    /// fsync every commit (survives power loss) rather than only surviving a process crash.
    pub synchronous_full: bool,
    /// Most writes one group commit may carry.
    pub max_batch: usize,
    /// How long Idempotency-Key answers of won claims are kept.
    pub idempotency_ttl: Duration,
    /// Retention and caps of the answers of claims that changed nothing.
    pub idempotency_limits: IdemLimits,
    /// The time claims and holds are decided by (tests move it; see `crate::clock`).
    pub clock: Arc<dyn Clock>,
    /// Runs the engine's background tasks (the hold sweep, idempotency pruning, in-process
    /// recovery): the deployment's one supervisor (`crate::app`), or one of its own.
    pub supervisor: Arc<Supervisor>,
}

impl EmbeddedOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            synchronous_full: true,
            max_batch: 4096,
            idempotency_ttl: Duration::from_secs(24 * 3600),
            idempotency_limits: IdemLimits::default(),
            clock: crate::clock::system(),
            supervisor: Supervisor::new(),
        }
    }
}

pub struct Embedded {
    campaigns: RwLock<HashMap<String, Arc<CampaignCell>>>,
    board: Arc<StockBoard>,
    ledger: Arc<SqliteLedger>,
    commit: GroupCommit,
    create: tokio::sync::Mutex<()>,
    idempotency_ttl: chrono::Duration,
    idem_limits: IdemLimits,
    clock: Arc<dyn Clock>,
    hold_stats: crate::engine::hold_stats::HoldStats,
    /// Runs the background tasks; kept here so they live as long as the engine.
    supervisor: Arc<Supervisor>,
    /// This engine, for admin operations that run on their own task (see `admin`).
    me: std::sync::Weak<Embedded>,
}

impl Embedded {
    /// Opens the ledger in `opts.data_dir` (locking the directory: a second process on it
    /// fails here) and rebuilds every campaign's state from it.
    pub async fn open(opts: EmbeddedOptions) -> anyhow::Result<Arc<Self>> {
        let ledger = Arc::new(SqliteLedger::open(&opts.data_dir, opts.synchronous_full).await?);
        let ttl = chrono::Duration::from_std(opts.idempotency_ttl)?;
        let board = StockBoard::new();
        let idem_limits = opts.idempotency_limits;
        let commit = GroupCommit::spawn(ledger.clone(), opts.max_batch);
        let at = opts.clock.now();
        let campaigns =
            recover::load_cells(&*ledger, &board, ttl, idem_limits, commit.epoch(), at).await?;
        // Every campaign is created through this process, which registers it first.
        board.mark_complete();
        let me = Arc::new_cyclic(|me| Self {
            campaigns: RwLock::new(campaigns),
            board,
            ledger,
            commit,
            create: tokio::sync::Mutex::new(()),
            idempotency_ttl: ttl,
            idem_limits,
            clock: opts.clock,
            hold_stats: crate::engine::hold_stats::HoldStats::default(),
            supervisor: opts.supervisor.clone(),
            me: me.clone(),
        });
        // Orders whose pay_by passed while the service was down expire before it serves.
        let expired = me
            .sweep()
            .await
            .map_err(|e| anyhow::anyhow!("expiring overdue pending orders at start: {e}"))?;
        if expired > 0 {
            tracing::info!(expired, "pending orders past their pay_by expired at start");
        }
        // Each loop ends when the engine is dropped; a panic restarts it (`crate::supervise`).
        let sup = &opts.supervisor;
        let weak = Arc::downgrade(&me);
        sup.spawn(holds::TASK, move |_| {
            let me = weak.clone();
            async move {
                holds::sweep_loop(me).await;
                Ok(())
            }
        });
        let every = (idem_limits.rejected_ttl / 2)
            .to_std()
            .unwrap_or_default()
            .clamp(Duration::from_secs(1), Duration::from_secs(600));
        let weak = Arc::downgrade(&me);
        sup.spawn("idempotency-prune", move |_| {
            let me = weak.clone();
            async move {
                upkeep::prune_loop(me, every).await;
                Ok(())
            }
        });
        let weak = Arc::downgrade(&me);
        sup.spawn("ledger-recovery", move |_| {
            let me = weak.clone();
            async move {
                upkeep::recovery_loop(me).await;
                Ok(())
            }
        });
        Ok(me)
    }

    /// The board of every campaign's stock and status, which the guards answer from.
    pub fn board(&self) -> Arc<StockBoard> {
        self.board.clone()
    }

    /// The ledger, for the readers beside the engine (the event feed).
    pub fn ledger(&self) -> Arc<SqliteLedger> {
        self.ledger.clone()
    }

    /// The lock service of `/v1/locks`, kept in this deployment's ledger.
    pub fn locks(&self) -> crate::lock::Locks {
        let store = crate::lock::embedded::EmbeddedLocks::new(self.ledger.clone());
        crate::lock::Locks::new(Arc::new(store))
    }

    /// Replaces every campaign's state by the one re-read from the ledger, after a commit
    /// whose outcome was unknown. Claims meanwhile answer 503 (their writes are stale).
    async fn recover(&self, reason: &str) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let _no_creates = self.create.lock().await;
        self.ledger.reopen_writer().await;
        let epoch = self.commit.epoch();
        let cells = recover::load_cells(
            &*self.ledger,
            &self.board,
            self.idempotency_ttl,
            self.idem_limits,
            epoch,
            self.clock.now(),
        )
        .await?;
        let n = cells.len();
        *self.campaigns.write() = cells;
        self.commit.recovered(epoch);
        if let Err(e) = self.sweep().await {
            tracing::warn!(error = %e, "expiring overdue pending orders after the re-read failed; the sweeper retries");
        }
        tracing::warn!(
            campaigns = n,
            took_ms = started.elapsed().as_millis() as u64,
            reason,
            "engine state re-read from the ledger; acknowledging again"
        );
        Ok(())
    }

    fn cell(&self, id: &str) -> Result<Arc<CampaignCell>, Error> {
        self.campaigns
            .read()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::campaign_not_found(id))
    }
}

#[async_trait]
impl Backend for Embedded {
    async fn create_campaign(
        &self,
        c: NewCampaign,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        self.create(c, key).await
    }

    async fn campaign(&self, id: &str) -> Result<CampaignView, Error> {
        Ok(self.cell(id)?.view())
    }

    async fn restock(
        &self,
        id: &str,
        restock: Restock,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        self.add_stock(id, restock, key).await
    }

    async fn set_status(
        &self,
        id: &str,
        to: Status,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        self.change_status(id, to, key).await
    }

    async fn claim(
        &self,
        id: &str,
        req: ClaimRequest,
        key: Option<IdempotencyKey>,
    ) -> Result<ClaimAnswer, Error> {
        self.decide_and_commit(id, req, key).await
    }

    async fn order(&self, order_id: &str) -> Result<Order, Error> {
        parse_order_id(order_id)?;
        self.ledger
            .order(order_id)
            .await
            .map_err(|e| Error::unavailable("reading the order failed", e))?
            .ok_or_else(|| Error::order_not_found(order_id))
    }

    async fn orders(&self, campaign_id: &str, query: OrderQuery) -> Result<OrderPage, Error> {
        self.cell(campaign_id)?;
        crate::ledger::order_page(&*self.ledger, campaign_id, &query).await
    }

    async fn cancel(&self, order_id: &str) -> Result<Order, Error> {
        self.cancel_order(order_id).await
    }

    async fn confirm(&self, order_id: &str) -> Result<Order, Error> {
        self.confirm_order(order_id).await
    }

    fn supports_holds(&self) -> bool {
        true
    }

    fn refresh_metrics(&self, registry: &crate::telemetry::Registry) {
        self.hold_stats.refresh(registry);
        // Units in pending orders, per campaign with holds (campaigns are the admin's, so the
        // label set is bounded by what the admin created).
        let cells: Vec<_> = self.campaigns.read().values().cloned().collect();
        for cell in cells {
            let view = cell.view();
            if let Some(h) = view.holds {
                registry
                    .campaign_gauge(crate::telemetry::catalog::CAMPAIGN_PENDING, &view.id)
                    .set(h.pending as f64);
            }
        }
    }

    async fn health(&self) -> Result<(), Error> {
        match self.commit.health() {
            WriterHealth::Writable => {}
            WriterHealth::Unwritable { since, reason } => {
                return Err(Error::Unavailable(format!(
                    "the ledger is unwritable since {} s ago ({reason}); claims and admin changes answer 503, reads work",
                    since.elapsed().as_secs()
                )))
            }
            WriterHealth::Recovering { reason } => {
                return Err(Error::Unavailable(format!(
                    "re-reading the engine's state from the ledger after a failed commit ({reason})"
                )))
            }
        }
        if let Err(down) = self.supervisor.health() {
            return Err(Error::Unavailable(format!(
                "a background task is not running: {down}"
            )));
        }
        self.ledger
            .ping()
            .await
            .map_err(|e| Error::unavailable("the ledger does not answer", e))?;
        self.commit.flush().await.map_err(commit_failed)
    }

    async fn shutdown(&self) {
        if let Err(e) = self.commit.flush().await {
            tracing::error!(error = %e, "final ledger flush failed");
        }
        // Nothing is written after the final flush: close the writer and give the data
        // directory up now, so a successor can start even while this process winds down.
        self.ledger.close().await;
    }

    async fn set_limits(&self, id: &str, limits: CampaignLimits) -> Result<CampaignLimits, Error> {
        self.store_limits(id, limits).await
    }

    async fn all_limits(&self) -> Result<Vec<(String, CampaignLimits)>, Error> {
        self.ledger
            .campaign_limits()
            .await
            .map_err(|e| Error::unavailable("reading rate limits failed", e))
    }
}
