//! The one integration-test binary of seckill: real HTTP on port-0 listeners, real SQLite in
//! temp dirs, real redis-server and PostgreSQL instances for the scale-out deployment, real
//! server processes for the crash tests.

mod bad_input;
mod conformance;
mod crash;
mod helpers;
mod invariants;
mod scale_out;
mod servers;
