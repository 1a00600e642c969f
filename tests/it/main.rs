//! The one integration-test binary of seckill: real HTTP on port-0 listeners, real SQLite in
//! temp dirs, real redis-server and PostgreSQL instances for the scale-out deployment, real
//! server processes for the crash tests.

mod admin_crash;
mod bad_input;
mod bench_run;
mod bench_verify;
mod chaos;
mod child;
mod cli;
mod commit_failure;
mod conformance;
mod crash;
mod deploy;
mod events;
mod fast_dispatch;
mod fuzz_props;
mod guards;
mod helpers;
mod holds;
mod hostile;
mod invariants;
mod ledger_rules;
mod ledger_upgrade;
mod locks;
mod metrics;
mod model;
mod openapi;
mod process;
mod room;
mod room_bench;
mod scale_out;
mod servers;
mod storage_faults;
mod tls;
