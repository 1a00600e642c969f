//! The ledger: the durable system of record for campaigns, orders and idempotency answers.
//!
//! A ledger applies batches of [`LedgerWrite`]s, each batch in one transaction, and answers the
//! read queries of the API. In the scale-out ledger, where the pipeline can deliver an order
//! twice, order inserts are idempotent on the order id; the embedded ledger never replays, so
//! there an existing order id is a fault (see `sqlite::writer`).

pub mod admin_keys;
mod dir_lock;
pub mod feed;
mod group_commit;
pub mod invariants;
mod migrations;
mod postgres;
pub(crate) mod rows;
pub mod sinks;
mod sqlite;
mod write_fault;

pub use dir_lock::DirLock;
pub use group_commit::{CommitError, CommitFault, GroupCommit, WriterHealth};
pub use postgres::entries::PipelineWrite;
pub use postgres::holds::{Applied, Transition, DIFFERENT_ORDER};
pub use postgres::lineage::{stream_pos, NodeRead, Origin, Recorded, StreamPos, Verdict};
pub use postgres::liveness::{Dormant, Liveness};
pub use postgres::ops::{is_data_error, FailedOrder, Restocked};
pub use postgres::pipeline::PipelineOutcome;
pub use postgres::recovery::{GateSnapshot, PendingOrder};
pub use postgres::{fences, PgLedger};
pub use sqlite::room::JoinRow;
pub use sqlite::SqliteLedger;
pub use write_fault::WriteFault;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::CampaignDef;
use crate::domain::{CampaignLimits, ClaimAnswer, Order, Status};

/// An idempotency answer to keep: the first processed answer for (campaign, user, key).
#[derive(Debug, Clone, PartialEq)]
pub struct IdemRecord {
    pub campaign_id: String,
    pub user_id: String,
    pub key: String,
    pub answer: ClaimAnswer,
    pub created_at: DateTime<Utc>,
}

/// One state change to persist.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerWrite {
    CreateCampaign {
        def: CampaignDef,
        total: u64,
        codes: Vec<String>,
        status: Status,
        at: DateTime<Utc>,
    },
    Order(Order),
    Idem(IdemRecord),
    Restock {
        campaign_id: String,
        units: u64,
        codes: Vec<String>,
        at: DateTime<Utc>,
    },
    Status {
        campaign_id: String,
        status: Status,
        at: DateTime<Utc>,
    },
    Cancel {
        order_id: String,
        at: DateTime<Utc>,
    },
    /// A pending order confirmed before its `pay_by`.
    Confirm {
        order_id: String,
        at: DateTime<Utc>,
    },
    /// A pending order whose `pay_by` passed unconfirmed.
    Expire {
        order_id: String,
        at: DateTime<Utc>,
    },
    /// Remembers an admin Idempotency-Key, in the transaction of the change it guards.
    AdminKey {
        key: crate::domain::AdminKey,
        at: DateTime<Utc>,
    },
    /// Replaces a campaign's guard rate limits.
    Limits {
        campaign_id: String,
        limits: CampaignLimits,
        at: DateTime<Utc>,
    },
}

/// A campaign as the ledger holds it: what recovery needs besides its codes and orders.
#[derive(Debug, Clone)]
pub struct StoredCampaign {
    pub def: CampaignDef,
    pub total: u64,
    pub status: Status,
    /// Highest order seq ever used (active or cancelled).
    pub max_seq: u64,
    /// Units in live orders (active, pending, confirmed), as the ledger counts them.
    pub live_units: u64,
    /// Whether any of its orders is pending (waiting for a confirm or its `pay_by`).
    pub pending: bool,
    /// Whether the ledger may hold Idempotency-Key answers of its claims since the retention
    /// point recovery was asked for (`true` when the ledger cannot tell).
    pub answers: bool,
}

/// What a [`Recovery`] wants of a campaign besides its definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Its codes, orders and idempotency answers too.
    Everything,
    /// Nothing more: its buyers are not needed to answer (see `engine::embedded::recover`).
    DefinitionOnly,
}

/// A pending order as recovery reads it.
#[derive(Debug, Clone, Copy)]
pub struct PendingRow<'a> {
    pub seq: u64,
    pub user_id: &'a str,
    pub qty: u64,
    pub codes: &'a [String],
    pub pay_by: DateTime<Utc>,
}

/// Receives the ledger's contents at recovery one row at a time, so reading a ledger of ten
/// million orders never holds more than one row besides what the receiver keeps.
///
/// Order of the calls: every campaign; then, per campaign, its codes in hand-out order; then
/// the live orders (active or confirmed; campaigns interleaved); then the pending orders; then
/// the idempotency answers. Nothing but the definition is handed for a campaign the receiver
/// answered [`Wanted::DefinitionOnly`].
pub trait Recovery: Send {
    fn campaign(&mut self, c: StoredCampaign) -> anyhow::Result<Wanted>;
    /// The next code of a campaign, in the order they were added.
    fn code(&mut self, campaign_id: &str, code: String) -> anyhow::Result<()>;
    /// One live order (active or confirmed): (user, qty, codes).
    fn order(
        &mut self,
        campaign_id: &str,
        user_id: &str,
        qty: u64,
        codes: &[String],
    ) -> anyhow::Result<()>;
    /// An idempotency answer younger than the retention.
    fn idem(&mut self, rec: IdemRecord) -> anyhow::Result<()>;
    /// One pending order (campaigns with holds) with its seq and deadline; streamed after the
    /// live orders of every campaign.
    fn pending(&mut self, campaign_id: &str, p: PendingRow<'_>) -> anyhow::Result<()> {
        anyhow::bail!(
            "pending order {} of campaign {campaign_id:?}: this reader does not know holds",
            p.seq
        )
    }
}

#[async_trait]
pub trait Ledger: sinks::SinkStore + Send + Sync + 'static {
    /// Applies the writes in one transaction: all or nothing.
    async fn apply(&self, writes: &[&LedgerWrite]) -> Result<(), WriteFault>;

    async fn order(&self, order_id: &str) -> anyhow::Result<Option<Order>>;

    /// Orders of a campaign with seq > `after`, oldest first.
    async fn orders(
        &self,
        campaign_id: &str,
        user_id: Option<&str>,
        after: u64,
        limit: u32,
    ) -> anyhow::Result<Vec<Order>>;

    /// Streams everything needed to rebuild the engine state into `into` (see [`Recovery`]);
    /// idempotency answers since `idem_since`.
    async fn recover(
        &self,
        idem_since: DateTime<Utc>,
        into: &mut dyn Recovery,
    ) -> anyhow::Result<()>;

    /// Deletes idempotency answers older than `before`; returns how many.
    async fn prune_idempotency(&self, before: DateTime<Utc>) -> anyhow::Result<u64>;

    async fn ping(&self) -> anyhow::Result<()>;

    /// Commits a write that leaves no trace, to learn whether the ledger can write again
    /// (tried every second while a full disk keeps batches failing).
    async fn probe(&self) -> anyhow::Result<()> {
        self.ping().await
    }

    /// Every campaign's stored guard rate limits.
    async fn campaign_limits(&self) -> anyhow::Result<Vec<(String, CampaignLimits)>>;

    /// Where the event feed stands (`feed`).
    async fn feed_head(&self) -> anyhow::Result<feed::FeedHead>;

    /// The feed's events `read` asks for, oldest first.
    async fn feed(&self, read: &feed::FeedRead<'_>) -> anyhow::Result<Vec<crate::domain::Event>>;

    /// Gives positions to committed events that have none yet. The embedded ledger numbers
    /// them as its one writer commits; PostgreSQL's writers cannot.
    async fn number_feed(&self) -> anyhow::Result<()> {
        Ok(())
    }

    /// Removes up to `batch` events older than `before` from the start of the feed; the last
    /// position removed so far.
    async fn prune_feed(&self, before: DateTime<Utc>, batch: u32) -> anyhow::Result<u64>;
}

/// One page of a campaign's orders, oldest first. Fetches one row more than the page holds so
/// `next_cursor` is set exactly when another page exists.
pub async fn order_page(
    ledger: &dyn Ledger,
    campaign_id: &str,
    query: &crate::domain::OrderQuery,
) -> Result<crate::domain::OrderPage, crate::domain::Error> {
    let (after, limit) = query.resolve()?;
    let rows = ledger
        .orders(campaign_id, query.user_id.as_deref(), after, limit + 1)
        .await
        .map_err(|e| crate::domain::Error::unavailable("reading orders failed", e))?;
    Ok(crate::domain::OrderPage::from_rows(rows, limit))
}
