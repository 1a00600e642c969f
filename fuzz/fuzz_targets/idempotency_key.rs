#![no_main]
//! Fuzz target: the properties of `seckill::fuzzing::idempotency_key` on coverage-guided input.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| seckill::fuzzing::idempotency_key(data));
