//! The parser properties of `seckill::fuzzing`, checked with proptest on every `cargo test`
//! (no nightly needed): the same functions the cargo-fuzz targets in `fuzz/` drive for longer
//! (`scripts/fuzz.sh`). Inputs mix raw bytes with near-valid text, so the accepting branches
//! of each parser, where the round-trip properties live, are reached too.

use proptest::prelude::*;
use seckill::fuzzing;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Raw bytes, or text from `pattern`, as bytes.
fn bytes_or(pattern: &'static str) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::string::string_regex(pattern)
            .expect("valid pattern")
            .prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn rates(data in bytes_or(r#" ?[0-9]{0,8} ?/ ?[smhx]{0,2}(;burst=[0-9]{0,8})?|\{"per_user": ?"[0-9]{1,3}/[smh]"\}"#)) {
        fuzzing::rate(&data);
    }

    #[test]
    fn identity_tokens(data in bytes_or(r"v1\.[A-Za-z0-9_-]{0,12}\.[0-9+-]{0,12}\.[A-Za-z0-9_-]{0,44}")) {
        fuzzing::identity(&data);
    }

    #[test]
    fn client_ips(data in bytes_or(r"[\x00-\x03]((10\.[0-9]\.0\.1|203\.0\.113\.[0-9]|::1|fd00::[0-9]|2001:db8::[0-9]|x), ?){0,4}\x00[0-9a-f:./]{0,20}")) {
        fuzzing::client_ip(&data);
    }

    #[test]
    fn order_ids(data in bytes_or(r"[a-z-]{0,6}-[+-]?[0-9]{0,20}")) {
        fuzzing::order_id(&data);
    }

    #[test]
    fn cursors(data in bytes_or(r"(cursor=[0-9+ -]{0,21}|limit=[0-9-]{0,6}|user_id=[a-z%0-9]{0,6}|x=1)(&(cursor|limit)=[0-9]{0,5}){0,2}")) {
        fuzzing::cursor(&data);
    }

    #[test]
    fn idempotency_keys(data in bytes_or(r"[ -~\t]{0,300}")) {
        fuzzing::idempotency_key(&data);
    }

    #[test]
    fn stream_entries(data in bytes_or(r"[\x00-\x02]c\x00(order_id\x00c-[0-9]{1,3}\x00|user\x00u[0-9]\x00|qty\x00-?[0-9]{1,3}\x00|at\x00-?[0-9]{1,17}\x00|codes\x00[A-C\n]{0,5}\x00){0,6}")) {
        fuzzing::stream_entry(&data);
    }

    #[test]
    fn ledger_answers(data in bytes_or(r#"\{"outcome": ?"(won|sold_out|paused|x)"(, ?"(order_id|qty|codes|remaining|held)": ?(1|-1|"c-1"|\["A"\]|null|1e3|18446744073709551616)){0,3}\}"#)) {
        fuzzing::ledger_answer(&data);
    }
}

proptest! {
    #![proptest_config(cases(600))]

    /// Whole requests through the real router: a 2xx, or a 4xx with a JSON error that changed
    /// nothing.
    #[test]
    fn http_requests(data in bytes_or(concat!(
        r#"[\x00-\x08]([a-z0-9=&%-]{0,12}|c-[0-9]{1,2}|p-1|cursor=1&limit=2)\x00"#,
        r#"(\{(("user_id": ?"[a-z0-9 ]{0,4}"|"qty": ?(-?[0-9]{1,3}|1e2|"1"|null)|"units": ?-?[0-9]{1,3}|"codes": ?\["[A-Z]{0,2}"\]|"id": ?"[a-z]{0,3}"|"stock": ?[0-9]{1,2}|"per_user": ?"[0-9]/[smh]")(, ?)?){0,3}\}?|\[\]|null|"x")"#,
    ))) {
        fuzzing::http_request(&data);
    }
}
