//! Engines: the atomic gate that decides every claim.
//!
//! `state` holds the pure per-campaign rules; `embedded` wraps them in per-campaign locks and
//! the SQLite group commit to form the embedded deployment; `scale_out` is the scale-out gate (Lua
//! scripts on Redis, PostgreSQL ledger). `detach` runs the admin operations of both on their own
//! tasks, so a dropped request never stops one half-way.

pub mod backend;
mod detach;
pub mod embedded;
mod hold_stats;
mod idempotency;
pub mod scale_out;
pub mod state;

pub use embedded::{Embedded, EmbeddedOptions};
pub use idempotency::IdemLimits;
pub use scale_out::{ScaleOut, ScaleOutOptions};
