//! Behavioural tests, written once and run against every deployment (see `conformance!`).

mod admin;
mod claims;
mod dropped;
mod order_ids;
