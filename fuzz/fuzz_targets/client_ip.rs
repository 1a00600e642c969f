#![no_main]
//! Fuzz target: the properties of `seckill::fuzzing::client_ip` on coverage-guided input.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| seckill::fuzzing::client_ip(data));
