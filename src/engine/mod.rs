//! Engines: the atomic gate that decides every claim.
//!
//! `state` holds the pure per-campaign rules; `embedded` wraps them in per-campaign locks and
//! the SQLite group commit to form the embedded deployment.

pub mod embedded;
mod idempotency;
pub mod state;

pub use embedded::{Embedded, EmbeddedOptions};
