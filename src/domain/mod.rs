//! Pure domain model of a flash sale: campaigns, claims, outcomes and orders.
//!
//! Nothing here does I/O. Both deployments (embedded and scale-out) and the load generator share
//! these types, so the wire format and the validation rules cannot drift between them.

mod admin_key;
mod campaign;
mod claim;
mod error;
mod event;
mod limits;
mod order;
mod refused;
mod room;
mod validate;

pub use admin_key::AdminKey;
pub use campaign::{
    CampaignDef, CampaignView, HoldsView, Kind, NewCampaign, NewCampaignBody, Restock, RestockBody,
    Status, Supply, MAX_HOLD_SECONDS, MAX_TOTAL,
};
pub use claim::{ClaimAnswer, ClaimRequest, IdempotencyKey, Outcome};
pub use error::Error;
pub use event::{Event, EventFilter, EventPage, EventQuery, EventType};
pub use limits::{CampaignLimits, Rate, MAX_RATE_COUNT};
pub use order::{parse_order_id, Order, OrderPage, OrderQuery, OrderState};
pub use refused::{RefusedOrder, RefusedOrders};
pub use room::{
    JoinRequest, RoomAnswer, WaitingRoom, WaitingRoomBody, DEFAULT_TICKET_SECONDS,
    MAX_ADMIT_PER_SECOND, MAX_TICKET_SECONDS,
};
pub use validate::{validate_campaign_id, validate_user_id};

pub use crate::clock::now;
