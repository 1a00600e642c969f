#![no_main]
//! Fuzz target: the properties of `seckill::fuzzing::stream_entry` on coverage-guided input.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| seckill::fuzzing::stream_entry(data));
