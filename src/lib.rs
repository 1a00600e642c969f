//! seckill: a flash-sale engine that never oversells and never loses an acknowledged order.
//!
//! The library holds everything; `main.rs` only parses the command line and calls [`cli::run`].

pub mod app;
pub mod bench;
pub mod chaos;
pub mod cli;
pub mod clock;
pub mod config;
pub mod domain;
pub mod duration;
pub mod engine;
pub mod faults;
#[doc(hidden)]
pub mod fuzzing;
pub mod guard;
pub mod http;
pub mod ledger;
pub mod lock;
pub mod pipeline;
pub mod supervise;
pub mod telemetry;
