//! Properties of every parser that reads untrusted bytes, one function per parser.
//!
//! Each function takes arbitrary bytes, runs one parser on them and panics if a property that
//! must hold for *every* input is violated: never a panic inside seckill, parse → print →
//! parse round-trips, a token verifies only with its key, a rate never has a zero period.
//! The cargo-fuzz targets in `fuzz/` call them with coverage-guided inputs (`scripts/fuzz.sh`)
//! and the proptest suite (`tests/it/fuzz_props.rs`) with random ones on every `cargo test`,
//! so both check the same properties. Private parsers are reached from here rather than
//! copied. Not part of seckill's API.

mod http;
mod values;

pub use http::http_request;
pub use values::{
    client_ip, cursor, idempotency_key, identity, ledger_answer, order_id, rate, stream_entry,
};

/// Splits fuzz input into the parts a target needs: first byte, then the rest cut at the
/// first NUL (a field separator an HTTP header or a JSON body cannot carry unescaped).
pub(crate) fn split(data: &[u8]) -> (u8, &[u8], &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return (0, &[], &[]);
    };
    match rest.iter().position(|&b| b == 0) {
        Some(i) => (first, &rest[..i], &rest[i + 1..]),
        None => (first, rest, &[]),
    }
}
