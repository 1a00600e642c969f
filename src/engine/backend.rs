//! The operations the HTTP API needs, as one trait with one implementation per deployment.
//!
//! The embedded deployment (in-process engine and SQLite) and the scale-out deployment (Redis
//! gate, PostgreSQL ledger, order stream) both implement [`Backend`]; the router, the CLI and
//! the conformance tests only ever see this trait, which keeps the two behaviours identical.

use async_trait::async_trait;

use crate::domain::{
    AdminKey, CampaignLimits, CampaignView, ClaimAnswer, ClaimRequest, Error, IdempotencyKey,
    NewCampaign, Order, OrderPage, OrderQuery, RefusedOrders, Restock, Status,
};

#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Creates a campaign; a duplicate id is [`Error::Conflict`] unless `key` says this very
    /// create was processed before (then the campaign's current view).
    async fn create_campaign(
        &self,
        campaign: NewCampaign,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error>;

    /// The current view; `remaining` comes from the atomic gate.
    async fn campaign(&self, id: &str) -> Result<CampaignView, Error>;

    /// Adds units or codes to a campaign; a retry with the same `key` adds nothing and answers
    /// the current view.
    async fn restock(
        &self,
        id: &str,
        restock: Restock,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error>;

    /// Pause, resume or close. Atomic with respect to claims: once this returns, no claim that
    /// had not already won wins while the campaign is paused or closed. A retry with the same
    /// `key` changes nothing and answers the current view.
    async fn set_status(
        &self,
        id: &str,
        status: Status,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error>;

    /// Processes one claim. The request is already validated. A `won` answer is only returned
    /// once the order cannot be lost.
    async fn claim(
        &self,
        id: &str,
        request: ClaimRequest,
        key: Option<IdempotencyKey>,
    ) -> Result<ClaimAnswer, Error>;

    async fn order(&self, order_id: &str) -> Result<Order, Error>;

    async fn orders(&self, campaign_id: &str, query: OrderQuery) -> Result<OrderPage, Error>;

    /// Wins of the campaign the ledger did not take, oldest first (`domain::refused`). The
    /// embedded deployment records none.
    async fn refused_orders(&self, campaign_id: &str) -> Result<RefusedOrders, Error> {
        self.campaign(campaign_id).await?;
        Ok(RefusedOrders {
            refused: Vec::new(),
        })
    }

    /// Cancels an order, giving its units, codes and allowance back. Cancelling twice returns
    /// the same cancelled order.
    async fn cancel(&self, order_id: &str) -> Result<Order, Error>;

    /// Confirms a pending order before its `pay_by` (see docs/HOLDS.md). Confirming twice
    /// returns the same confirmed order; expired, cancelled or overdue is
    /// [`Error::Conflict`]; an order of a campaign without holds is [`Error::Invalid`].
    async fn confirm(&self, order_id: &str) -> Result<Order, Error> {
        let order = self.order(order_id).await?;
        Err(Error::invalid(format!(
            "order '{}' belongs to a campaign without holds; there is nothing to confirm",
            order.order_id
        )))
    }

    /// The waiting room of campaign `id` (part of its definition, never changed), read from
    /// the system of record; [`Error::NotFound`] if there is no such campaign.
    async fn waiting_room(&self, id: &str) -> Result<Option<crate::domain::WaitingRoom>, Error> {
        Ok(self.campaign(id).await?.waiting_room)
    }

    /// Whether campaigns may have `hold_seconds` in this deployment.
    fn supports_holds(&self) -> bool {
        false
    }

    /// Ok when the engine and the ledger both answer.
    async fn health(&self) -> Result<(), Error>;

    /// Orders answered `won` but not yet in the ledger; `None` when the deployment commits
    /// before answering (embedded) or the lag cannot be read.
    async fn pipeline_lag(&self) -> Option<u64> {
        None
    }

    /// Finishes outstanding work (pending commits, pipeline) before the process exits.
    async fn shutdown(&self);

    /// Stores a campaign's guard rate limits (replacing the previous ones); unknown campaign
    /// is [`Error::NotFound`].
    async fn set_limits(&self, id: &str, limits: CampaignLimits) -> Result<CampaignLimits, Error>;

    /// Every campaign's stored guard rate limits (loaded by the guards at startup).
    async fn all_limits(&self) -> Result<Vec<(String, CampaignLimits)>, Error>;

    /// Every campaign's id, for a backend whose stock board does not know them all (re-read
    /// with the limits: per-user rate buckets are charged only for campaigns that exist);
    /// `None` when the board does.
    async fn campaign_ids(&self) -> Result<Option<Vec<String>>, Error> {
        Ok(None)
    }

    /// Extra facts `/healthz` shows (healthy or not), e.g. the settings of a store.
    fn health_details(&self) -> Option<serde_json::Value> {
        None
    }

    /// Sets this backend's scrape-time series in the instance's registry (called by each
    /// `GET /metrics` and dashboard poll).
    fn refresh_metrics(&self, _registry: &crate::telemetry::Registry) {}
}
