//! A broken promise as the campaign reports it: what was broken, and the orders it concerns.
//! Each checker (`check.rs`, `ledger.rs`, `keys.rs`, `locks.rs`) returns these.

use serde::Serialize;

/// One broken promise.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub what: String,
    pub orders: Vec<String>,
}

/// A finding about no order in particular.
pub fn finding(what: String) -> Finding {
    Finding {
        what,
        orders: vec![],
    }
}
