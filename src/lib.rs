//! seckill: a flash-sale engine that never oversells and never loses an acknowledged order.
//!
//! The library holds everything; `main.rs` only calls [`cli::main`]. The contract it serves
//! is `docs/API.md`; how it keeps its promises under faults is `docs/RELIABILITY.md`.
//!
//! # Layout
//!
//! From the ground up: a module imports only modules above it in this list, never one below,
//! and no file imports another that imports it back.
//!
//! - [`clock`], [`duration`], [`faults`]: seckill's own time (a step of the system clock
//!   moves no deadline), one reading of durations on the command line, and the fault hooks
//!   the tests inject (`SECKILL_FAULTS`).
//! - [`domain`]: the sale's vocabulary, with no I/O: campaigns ([`domain::CampaignDef`],
//!   [`domain::CampaignView`]), claims and their outcomes, orders, the API's errors, and the
//!   validation rules of every input. Both deployments, the load generator and the ledgers
//!   share it, so the wire format cannot drift between them.
//! - [`telemetry`], [`supervise`]: metrics and logs; supervised background tasks (restarted
//!   when they die, `/healthz` 503 meanwhile).
//! - [`redis_conn`]: connections to Redis (one node, Sentinel, Cluster) that refuse at once
//!   while Redis is down and heal by themselves; the gate, the pipeline and the Redis lock
//!   stores all use them.
//! - [`ledger`]: the durable record, one folder per driver (`ledger/sqlite/`,
//!   `ledger/postgres/`, with matching file names) behind one [`ledger::Ledger`] trait whose
//!   writes fail with a typed [`ledger::WriteFault`]; the group commit of the embedded
//!   deployment; the invariants both ledgers check at write time ([`ledger::invariants`]);
//!   fenced writes ([`ledger::fences`]); the event feed's rows, written by triggers in the
//!   transaction of each change ([`ledger::feed`]).
//! - [`feed`]: the event feed of `GET /v1/events`: pages after a cursor, long polls, and the
//!   upkeep that numbers PostgreSQL's events in commit order and applies the retention.
//! - [`lock`]: leases with fencing tokens on four stores (embedded, Redis, Redlock, HTTP).
//! - [`guard`]: what stands before the engine: per-user and per-IP rate limits, load
//!   shedding, the admission gate and the stock board that answers `sold_out` without the
//!   engine ([`guard::soldout`]), signed identities.
//! - [`engine`]: the atomic gate. [`engine::state`] holds the pure per-campaign rules;
//!   [`engine::embedded`] runs them in process over SQLite; [`engine::scale_out`] runs the
//!   same rules as Lua scripts on Redis over PostgreSQL; [`engine::backend::Backend`] is the
//!   one trait the HTTP layer calls.
//! - [`pipeline`]: scale-out only: moves won orders and hold resolutions from the Redis
//!   streams into PostgreSQL, exactly once, through failovers.
//! - [`room`]: the waiting room in front of a sale: a shuffled pre-queue, admissions at a set
//!   rate, signed tickets; kept in process over SQLite or in Redis, as the gate is.
//! - [`http`]: the API (`docs/API.md`), its OpenAPI document, the fast claim path, the
//!   listener's connection limits, the dashboard.
//! - [`app`]: assembles a deployment: [`app::App::build`] opens the engine, the guards, the
//!   listeners and every background task under one supervisor; [`app::scale_out::Worker`]
//!   is the pipeline alone.
//! - [`bench`](mod@bench), [`chaos`]: the verifying load generator and the fault campaign, which drive
//!   real deployments (processes, Redis, PostgreSQL) and check every promise afterwards.
//! - [`testing`]: the test kit the integration tests and the fault campaign share (server
//!   binaries, ports, the process harness, how each third-party server is started).
//! - [`cli`]: one subcommand per file.
//!
//! # A claim, end to end
//!
//! [`http`] validates it and asks the [`guard`]s; the stock board may answer `sold_out`
//! at once. Otherwise the [`engine::backend::Backend`] decides it:
//!
//! - **embedded**: the campaign's lock, [`engine::state::CampaignState::decide`], the order
//!   handed to the group commit under that lock; `won` is answered after SQLite committed.
//! - **scale-out**: one `claims.lua` call per batch of concurrent claims on a campaign decides
//!   each and appends each won order to the campaign's stream in the same step; `won` is
//!   answered once Redis (and, when asked, its replicas) has it, and the [`pipeline`] writes
//!   it to PostgreSQL.
//!
//! # Words that look alike
//!
//! - *holds*: a campaign's orders that wait for payment (`pending` until `pay_by`,
//!   `docs/HOLDS.md`); [`engine::state::Holds`] is their table in a campaign's state and
//!   [`engine::state::Held`] one of them.
//! - *holdings*: how many units each buyer has ([`engine::state::Holdings`]), which the
//!   per-user limit is checked against; the *holders* are the buyers with a holding.
//! - *hold stats*: counts of confirms and expiries for `/metrics`.
//! - *dormant*: a campaign that can sell nothing more (closed or ended, nothing pending),
//!   not loaded at start (README, "How it works").

pub mod app;
pub mod bench;
pub mod chaos;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod domain;
pub mod duration;
pub mod engine;
pub mod faults;
pub mod feed;
#[doc(hidden)]
pub mod fuzzing;
pub mod guard;
pub mod http;
pub mod ledger;
pub mod lock;
pub mod pipeline;
pub mod redis_conn;
pub mod room;
pub mod supervise;
pub mod telemetry;
pub mod testing;
