//! Behavioural tests, written once and run against every deployment (see `conformance!`).

mod admin;
pub(crate) mod admin_keys;
mod claims;
pub(crate) mod dropped;
mod order_ids;
