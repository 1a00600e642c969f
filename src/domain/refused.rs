//! Wins the ledger did not take: what an operator reads to reach the buyers told `won`.
//!
//! In the scale-out deployment an order answered `won` can fail to become an order: poison (the
//! ledger refused its data, or its stream entry did not parse), a reissued order id (Redis lost
//! state), a transition the ledger contradicts, or a write the ledger's rules refused
//! (`ledger::invariants`). Each is recorded in `failed_orders` and listed here. The embedded
//! deployment records none: its engine re-reads its state from the ledger instead of answering
//! a contradiction.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One recorded refusal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RefusedOrder {
    /// The order id the buyer was answered, when the entry named one.
    pub order_id: Option<String>,
    /// Why it is not an order.
    pub reason: String,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// The order stream entry it came in (its fields as JSON).
    pub entry: String,
}

/// The refusals of one campaign, oldest first (at most [`RefusedOrders::MAX`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RefusedOrders {
    pub refused: Vec<RefusedOrder>,
}

impl RefusedOrders {
    /// Most refusals one answer lists.
    pub const MAX: i64 = 1000;
}
