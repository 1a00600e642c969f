//! The embedded deployment: per-campaign state in process, SQLite ledger, group commit.
//!
//! Each campaign has its own `parking_lot` mutex; a claim locks only its campaign, runs the
//! atomic step of [`CampaignState::decide`](crate::engine::state::CampaignState::decide), and — still under the lock, so ledger order equals
//! decision order — submits the order to the group commit. The lock is released before any
//! waiting. The answer is sent only after the commit; if it fails, the commit callback gives the
//! units back and the client gets 503. Admin operations additionally take a per-campaign async
//! mutex so they never interleave with each other.
//!
//! Every change of a campaign's stock or status is published to the guard's stock board
//! under the same lock, before the operation answers (see `guard::soldout`).
//!
//! The module is split by concept: `cell` (one campaign's locked state), `claim` (the claim
//! path), `admin` (create, restock, status, cancel, limits) and `recover` (every cell rebuilt
//! from the ledger at start).

mod admin;
mod cell;
mod claim;
mod recover;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use parking_lot::RwLock;

use self::cell::Cell;
use crate::backend::Backend;
use crate::domain::{
    parse_order_id, CampaignLimits, CampaignView, ClaimAnswer, ClaimRequest, Error, IdempotencyKey,
    NewCampaign, Order, OrderPage, OrderQuery, Restock, Status,
};
use crate::guard::soldout::StockBoard;
use crate::ledger::{CommitError, GroupCommit, Ledger, SqliteLedger};

/// Settings of the embedded deployment.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    pub data_dir: PathBuf,
    /// fsync every commit (survives power loss) rather than only surviving a process crash.
    pub synchronous_full: bool,
    /// Most writes one group commit may carry.
    pub max_batch: usize,
    /// How long Idempotency-Key answers are kept.
    pub idempotency_ttl: Duration,
}

impl EmbeddedOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            synchronous_full: true,
            max_batch: 4096,
            idempotency_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

pub struct Embedded {
    campaigns: RwLock<HashMap<String, Arc<Cell>>>,
    board: Arc<StockBoard>,
    ledger: Arc<SqliteLedger>,
    commit: GroupCommit,
    create: tokio::sync::Mutex<()>,
    idempotency_ttl: chrono::Duration,
}

fn commit_failed(e: CommitError) -> Error {
    Error::unavailable("the change could not be committed to the ledger", e)
}

impl Embedded {
    /// Opens the ledger in `opts.data_dir` and rebuilds every campaign's state from it.
    pub async fn open(opts: EmbeddedOptions) -> anyhow::Result<Arc<Self>> {
        let ledger = Arc::new(SqliteLedger::open(&opts.data_dir, opts.synchronous_full).await?);
        let ttl = chrono::Duration::from_std(opts.idempotency_ttl)?;
        let board = StockBoard::new();
        let campaigns = recover::load_cells(&*ledger, &board, ttl).await?;
        let commit = GroupCommit::spawn(ledger.clone(), opts.max_batch);
        let me = Arc::new(Self {
            campaigns: RwLock::new(campaigns),
            board,
            ledger,
            commit,
            create: tokio::sync::Mutex::new(()),
            idempotency_ttl: ttl,
        });
        tokio::spawn(prune_loop(Arc::downgrade(&me)));
        Ok(me)
    }

    fn cell(&self, id: &str) -> Result<Arc<Cell>, Error> {
        self.campaigns
            .read()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::campaign_not_found(id))
    }

    /// Drops idempotency answers past their retention, in memory and in the ledger.
    async fn prune(&self) {
        let cutoff = Utc::now() - self.idempotency_ttl;
        let cells: Vec<_> = self.campaigns.read().values().cloned().collect();
        let dropped: usize = cells
            .iter()
            .map(|c| c.inner.lock().idem.prune(cutoff))
            .sum();
        match self.ledger.prune_idempotency(cutoff).await {
            Ok(rows) => tracing::debug!(dropped, rows, "idempotency answers pruned"),
            Err(e) => tracing::warn!(error = %e, "pruning idempotency answers failed"),
        }
    }
}

async fn prune_loop(me: std::sync::Weak<Embedded>) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tick.tick().await;
        match me.upgrade() {
            Some(me) => me.prune().await,
            None => return,
        }
    }
}

#[async_trait]
impl Backend for Embedded {
    async fn create_campaign(&self, c: NewCampaign) -> Result<CampaignView, Error> {
        self.create(c).await
    }

    async fn campaign(&self, id: &str) -> Result<CampaignView, Error> {
        Ok(self.cell(id)?.view())
    }

    async fn restock(&self, id: &str, restock: Restock) -> Result<CampaignView, Error> {
        self.add_stock(id, restock).await
    }

    async fn set_status(&self, id: &str, to: Status) -> Result<CampaignView, Error> {
        self.change_status(id, to).await
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

    async fn health(&self) -> Result<(), Error> {
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

    fn stock_board(&self) -> Option<Arc<StockBoard>> {
        Some(self.board.clone())
    }
}
