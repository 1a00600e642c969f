//! The one integration-test binary of seckill: real HTTP on port-0 listeners, real SQLite in
//! temp dirs, real server processes for the crash tests.

mod bad_input;
mod bench_run;
mod bench_verify;
mod conformance;
mod crash;
mod helpers;
mod invariants;
