//! The scale-out deployment: a Redis gate shared by many `seckill serve` instances, a
//! PostgreSQL ledger, and the order stream between them.
//!
//! Each claim is decided by a Lua script with the same rules as the embedded engine and, when it
//! wins, its order is appended to the campaign's Redis Stream in the same atomic step; the
//! answer goes out as soon as the script returns. Concurrent claims on one campaign share one
//! script call (`batch.rs`, `lua/claims.lua`), decided in arrival order exactly as the
//! one-claim script (`lua/claim.lua`) decides each. The pipeline
//! (`crate::pipeline`) moves stream entries into PostgreSQL. The ledger is the system of record
//! for campaign definitions and admin changes: they are committed there first and then applied
//! to Redis by guarded, idempotent scripts, so a process dying between the two writes leaves
//! the gate behind the ledger (never ahead of it), and [`ScaleOut::reconcile`] — run at start;
//! restocks and status changes also catch up on restocks — brings it level.
//!
//! Staying up through faults: every Redis connection is a self-healing link
//! ([`crate::redis_conn`]: requests refused at once while Redis is down, back within about
//! 250 ms of it answering);
//! the background tasks run under a [`Supervisor`] (restarted when they die, `/healthz` 503
//! meanwhile); Redis's eviction policy and persistence are checked (`settings.rs`); and a
//! failed claim says whether anything may have changed (`refuse.rs`). A Redis that came back
//! behind the ledger (older snapshot, lagging replica) is checked and rebuilt before any claim
//! is served from it (`fresh.rs`).
//!
//! [`ScaleOut`]'s methods, by the file a reader looks in (the [`Backend`] operations are in
//! this file and call into the others):
//!
//! | file | what `ScaleOut` does there |
//! | --- | --- |
//! | `startup.rs` | `open`: connect, load scripts, the start-up reconcile |
//! | `batch.rs`, `view.rs`, `refuse.rs`, `dormant.rs` | a claim: the batched script call, the campaign view and stock board, how a failed claim is answered, campaigns only the ledger holds |
//! | `admin.rs`, `replicated.rs`, `catch_up.rs` | create, restock, status: ledger first, then the gate; waits for replicas; the gate levelled after a lost apply |
//! | `holds.rs`, `cancel.rs` | confirms, cancels and the expiry sweep of pending orders |
//! | `fresh.rs`, `lineage.rs` | a Redis that came back behind the ledger, and Cluster lineages |

mod admin;
mod batch;
mod cancel;
mod catch_up;
mod dormant;
mod fresh;
mod health;
mod held;
mod holds;
mod keys;
mod lineage;
mod ratelimit;
mod refuse;
mod replicated;
mod scripts;
mod settings;
mod startup;
mod stock;
mod view;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use crate::redis_conn::link::{surely_not_executed, Health};
pub use crate::redis_conn::{RedisConn, RedisTarget};
pub use admin::{gate_state, rebuild_from_ledger};
pub use batch::{
    replicas::WaitReplicas, shared_wait::SharedWait, BatchClaim, BatchOptions, Batcher,
};
pub use held::order_of_record;
pub use holds::Expired;
pub use keys::{campaign_of_stream, Keys, GROUP};
pub use ratelimit::RedisLimiter;
pub use refuse::DEPENDENCY_GRACE;
pub use scripts::{Claimed, Scripts};
pub use settings::{info_field, Watch as RedisSettings};
pub use startup::{ScaleOutOptions, RECONCILE_JOB};
pub use stock::StockKeeper;
pub use view::stream_lag;

use crate::domain::{
    AdminKey, CampaignLimits, CampaignView, ClaimAnswer, ClaimRequest, Error, IdempotencyKey,
    NewCampaign, Order, OrderPage, OrderQuery, RefusedOrders, Restock, Status,
};
use crate::engine::backend::Backend;
use crate::engine::detach::detached;
use crate::ledger::{Ledger, LedgerWrite, PgLedger};
use crate::supervise::Supervisor;

pub struct ScaleOut {
    redis: RedisConn,
    /// Claims, batched per campaign on the claim connection: the same connection, sent only
    /// once Redis was checked (`fresh.rs`).
    claims: Arc<Batcher>,
    ledger: Arc<PgLedger>,
    scripts: Arc<Scripts>,
    supervisor: Arc<Supervisor>,
    /// Supervised tasks without which claims are refused (see [`DEPENDENCY_GRACE`]).
    claim_depends: Vec<&'static str>,
    limiter: Arc<RedisLimiter>,
    stock: Arc<StockKeeper>,
    settings: Arc<settings::Watch>,
    /// Campaigns whose last admin change may be saved but not applied (`catch_up.rs`).
    behind: catch_up::Behind,
    /// Leases on this deployment's Redis: the lock routes and the start-up reconcile.
    locks: crate::lock::Locks,
    /// Confirms and expiries this instance made, for `/metrics`.
    hold_stats: crate::engine::hold_stats::HoldStats,
    /// Units pending per campaign with holds, as the last sweep read them from the gate.
    pending_units: parking_lot::Mutex<std::collections::HashMap<String, u64>>,
    /// Redis Cluster: the campaigns being checked on a new node (`lineage.rs`).
    lineage: lineage::Checks,
    /// Campaigns' waiting rooms as the ledger defines them (never changed once created).
    rooms:
        parking_lot::RwLock<std::collections::HashMap<String, Option<crate::domain::WaitingRoom>>>,
    /// This engine, for admin operations that run on their own task (`engine::detach`).
    me: std::sync::Weak<ScaleOut>,
}

/// How often each instance re-reads every campaign's rate limits from the ledger: the
/// longest a `PUT …/limits` through one instance takes to apply on the others.
pub const LIMITS_REFRESH: Duration = Duration::from_secs(1);

fn redis_failed(context: &'static str) -> impl Fn(redis::RedisError) -> Error {
    move |e| Error::unavailable(context, e)
}

impl ScaleOut {
    pub fn ledger(&self) -> &Arc<PgLedger> {
        &self.ledger
    }

    /// The scripts loaded into this deployment's Redis, which the order pipeline runs too.
    pub fn scripts(&self) -> &Arc<Scripts> {
        &self.scripts
    }

    /// The board of every campaign's stock and status, kept current from Redis.
    pub fn board(&self) -> Arc<crate::guard::soldout::StockBoard> {
        self.stock.board()
    }

    /// The per-user and per-IP rate buckets, shared by every instance through Redis.
    pub fn rate_limiter(&self) -> Arc<dyn crate::guard::rate::RateLimiter> {
        self.limiter.clone()
    }

    /// The lock service of `/v1/locks`, on this deployment's Redis.
    pub fn locks(&self) -> crate::lock::Locks {
        self.locks.clone()
    }

    fn conn(&self) -> RedisConn {
        self.redis.clone()
    }

    /// A connection to the gate's Redis, for the waiting rooms (`crate::room::redis`).
    pub fn redis(&self) -> RedisConn {
        self.redis.clone()
    }

    /// `--redis-wait-replicas`, which the waiting rooms' joins wait for like claims.
    pub fn wait_replicas(&self) -> Option<WaitReplicas> {
        self.claims.replicas()
    }

    /// The ledger's waiting room of campaign `id`, read once; [`Error::NotFound`] without the
    /// campaign.
    pub(super) async fn room_of(
        &self,
        id: &str,
    ) -> Result<Option<crate::domain::WaitingRoom>, Error> {
        if let Some(r) = self.rooms.read().get(id) {
            return Ok(*r);
        }
        let room = self
            .ledger
            .waiting_room(id)
            .await
            .map_err(|e| Error::unavailable("reading the campaign from the ledger failed", e))?
            .ok_or_else(|| Error::campaign_not_found(id))?;
        self.rooms.write().insert(id.to_owned(), room);
        Ok(room)
    }
}

#[async_trait]
impl Backend for ScaleOut {
    async fn create_campaign(
        &self,
        c: NewCampaign,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        detached(&self.me, move |me| async move { me.create(c, key).await }).await
    }

    async fn campaign(&self, id: &str) -> Result<CampaignView, Error> {
        self.view(id).await
    }

    async fn waiting_room(&self, id: &str) -> Result<Option<crate::domain::WaitingRoom>, Error> {
        self.room_of(id).await
    }

    async fn set_limits(&self, id: &str, limits: CampaignLimits) -> Result<CampaignLimits, Error> {
        self.campaign(id).await?;
        self.ledger
            .apply(&[&LedgerWrite::Limits {
                campaign_id: id.to_owned(),
                limits,
                at: crate::domain::now(),
            }])
            .await
            .map_err(|e| Error::unavailable("storing rate limits failed", e))?;
        tracing::info!(campaign = id, limits = %serde_json::json!(limits), "rate limits set");
        Ok(limits)
    }

    async fn all_limits(&self) -> Result<Vec<(String, CampaignLimits)>, Error> {
        self.ledger
            .campaign_limits()
            .await
            .map_err(|e| Error::unavailable("reading rate limits failed", e))
    }

    async fn campaign_ids(&self) -> Result<Option<Vec<String>>, Error> {
        self.ledger
            .campaign_ids()
            .await
            .map(Some)
            .map_err(|e| Error::unavailable("reading campaign ids failed", e))
    }

    async fn restock(
        &self,
        id: &str,
        restock: Restock,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let id = id.to_owned();
        detached(&self.me, move |me| async move {
            let before = me.before_change();
            let view = me.restock_campaign(&id, restock, key).await;
            let view = me.replicated("the restock", before, view).await;
            me.behind.note(&id, &view);
            let view = view?;
            me.stock.changed(&id).await;
            Ok(view)
        })
        .await
    }

    async fn set_status(
        &self,
        id: &str,
        status: Status,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let id = id.to_owned();
        detached(&self.me, move |me| async move {
            let before = me.before_change();
            let view = me.change_status(&id, status, key).await;
            let view = me.replicated("the status change", before, view).await;
            me.behind.note(&id, &view);
            let view = view?;
            me.stock.changed(&id).await;
            Ok(view)
        })
        .await
    }

    async fn claim(
        &self,
        id: &str,
        req: ClaimRequest,
        key: Option<IdempotencyKey>,
    ) -> Result<ClaimAnswer, Error> {
        let key = key.as_ref().map(IdempotencyKey::as_str);
        self.dependencies_up()?;
        for attempt in 0..2 {
            let claim = self.claims.claim(id, &req.user_id, req.qty, key);
            // Bounded even while a connection is still reconnecting to an unreachable Redis.
            let claimed = tokio::time::timeout(refuse::CLAIM_TIMEOUT, claim)
                .await
                .unwrap_or_else(|_| {
                    Err(refuse::claim_failed(id, false)(anyhow::anyhow!(
                        "no answer from Redis in time"
                    )))
                })?;
            match claimed {
                Claimed::Answer(a) => {
                    self.note_stock(id, &req.user_id, &a).await;
                    return Ok(a);
                }
                Claimed::Missing if attempt == 0 => {
                    if let Some(answer) = self.dormant_answer(id, &req, key.is_some()).await? {
                        return Ok(answer);
                    }
                    self.install_from_ledger(id).await?
                }
                Claimed::Missing => break,
                Claimed::Unchecked if attempt == 0 => self.check_lineage(id).await?,
                refused => return Err(refuse::undecided(id, &refused)),
            }
        }
        Err(Error::campaign_not_found(id))
    }

    async fn order(&self, order_id: &str) -> Result<Order, Error> {
        crate::domain::parse_order_id(order_id)?;
        self.ledger
            .order(order_id)
            .await
            .map_err(|e| Error::unavailable("reading the order failed", e))?
            .ok_or_else(|| Error::order_not_found(order_id))
    }

    async fn orders(&self, campaign_id: &str, query: OrderQuery) -> Result<OrderPage, Error> {
        self.campaign(campaign_id).await?;
        crate::ledger::order_page(&*self.ledger, campaign_id, &query).await
    }

    async fn refused_orders(&self, campaign_id: &str) -> Result<RefusedOrders, Error> {
        self.campaign(campaign_id).await?;
        let refused = self
            .ledger
            .refused_orders(campaign_id)
            .await
            .map_err(|e| Error::unavailable("reading the refused orders failed", e))?;
        Ok(RefusedOrders { refused })
    }

    async fn cancel(&self, order_id: &str) -> Result<Order, Error> {
        let order_id = order_id.to_owned();
        detached(&self.me, move |me| async move {
            let before = me.before_change();
            let order = match me.cancel_order(&order_id).await {
                // Decided in Redis: unreplicated, its outcome is unknown (a retry answers it).
                Ok((order, true)) => me.decided_on_replicas("cancel", before, Ok(order)).await,
                // Saved in the ledger first: unreplicated, the catch-up applies it again.
                other => {
                    let order = other.map(|(o, _)| o);
                    me.replicated("the cancel", before, order).await
                }
            };
            if let Ok((campaign, _)) = crate::domain::parse_order_id(&order_id) {
                me.behind.note(campaign, &order);
            }
            let order = order?;
            me.stock.changed(&order.campaign_id).await;
            Ok(order)
        })
        .await
    }

    async fn confirm(&self, order_id: &str) -> Result<Order, Error> {
        let order_id = order_id.to_owned();
        detached(&self.me, move |me| async move {
            let before = me.before_change();
            let order = me.confirm_order(&order_id).await;
            let order = me.decided_on_replicas("confirm", before, order).await;
            if let Err(Error::Conflict(_)) = &order {
                // Perhaps expired on the spot: its units are back on sale.
                if let Ok((campaign, _)) = crate::domain::parse_order_id(&order_id) {
                    me.stock.changed(campaign).await;
                }
            }
            order
        })
        .await
    }

    fn supports_holds(&self) -> bool {
        true
    }

    async fn health(&self) -> Result<(), Error> {
        self.check_health().await
    }

    async fn pipeline_lag(&self) -> Option<u64> {
        self.lag().await.ok()
    }

    async fn shutdown(&self) {
        self.supervisor.shutdown().await;
    }

    fn health_details(&self) -> Option<serde_json::Value> {
        Some(self.details())
    }

    fn refresh_metrics(&self, registry: &crate::telemetry::Registry) {
        self.refresh(registry);
    }
}
