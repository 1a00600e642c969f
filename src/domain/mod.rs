//! Pure domain model of a flash sale: campaigns, claims, outcomes and orders.
//!
//! Nothing here does I/O. Both deployments (embedded and scale-out) and the load generator share
//! these types, so the wire format and the validation rules cannot drift between them.

mod campaign;
mod claim;
mod error;
mod order;
mod validate;

pub use campaign::{
    CampaignView, Kind, NewCampaign, NewCampaignBody, Restock, RestockBody, Status, Supply,
    MAX_TOTAL,
};
pub use claim::{ClaimAnswer, ClaimRequest, IdempotencyKey, Outcome};
pub use error::Error;
pub use order::{parse_order_id, Order, OrderPage, OrderQuery, OrderState};
pub use validate::{validate_campaign_id, validate_user_id};

/// Current time in microseconds since the Unix epoch: the unit every ledger stores.
pub fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}
