//! The bench's verifier, tested against a deployment that breaks the rules on purpose.
//!
//! `double::Double` is a small axum app serving the API routes the bench uses (create, view, claim,
//! orders). Run honestly it passes; each `Fault` makes it violate one invariant, and each test
//! runs the real `seckill::bench::run` against it and asserts the verifier reports exactly
//! that violation, with the offending orders.

mod double;

use std::collections::BTreeSet;
use std::time::Duration;

use seckill::bench::{self, BenchOpts, Invariant, ScenarioName};

use double::{spawn, Fault};

/// Runs a small bench against the double with `tune` applied; returns the violations found.
async fn violations(fault: Fault, tune: impl FnOnce(&mut BenchOpts)) -> BTreeSet<Invariant> {
    let url = spawn(fault).await;
    let mut opts = BenchOpts::new(&url, "double-token", ScenarioName::Seed000);
    opts.stock = Some(1_000);
    opts.users = Some(300);
    opts.requests = Some(300);
    opts.connections = Some(8);
    opts.drain_interval = Duration::from_millis(50);
    tune(&mut opts);
    let report = bench::run(&opts).await.expect("the bench runs");
    let v = report.verification.clone().expect("verification ran");
    // A lost order never shows up, so that ledger cannot drain: the bench verifies at timeout.
    assert_eq!(v.drained, fault != Fault::LoseOrder, "drained");
    for x in &v.violations {
        let needs_orders = !matches!(
            x.invariant,
            Invariant::UnderSold
                | Invariant::RemainingMismatch
                | Invariant::BadInputAccepted
                | Invariant::BadInputChangedState
        );
        assert!(
            !needs_orders || !x.orders.is_empty(),
            "{x:?} lists its orders"
        );
    }
    assert_eq!(report.clean(), v.violations.is_empty());
    v.violations.iter().map(|x| x.invariant).collect()
}

fn only(i: Invariant) -> BTreeSet<Invariant> {
    BTreeSet::from([i])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_double_passes() {
    assert!(violations(Fault::None, |_| {}).await.is_empty());
    // A sale that sells out, with repeat clickers: still clean.
    let found = violations(Fault::None, |o| {
        o.stock = Some(50);
        o.clicks = Some(2);
    })
    .await;
    assert!(found.is_empty(), "{found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_oversell() {
    let found = violations(Fault::Oversell, |o| o.stock = Some(50)).await;
    assert_eq!(found, only(Invariant::Oversold));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_code_handed_out_twice() {
    let found = violations(Fault::CodeTwice, |o| {
        o.stock = None;
        o.codes = Some(1_000);
    })
    .await;
    assert_eq!(found, only(Invariant::CodeTwice));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_user_over_the_limit() {
    let found = violations(Fault::OverLimit, |o| o.clicks = Some(2)).await;
    assert_eq!(found, only(Invariant::OverUserLimit));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_under_selling() {
    let found = violations(Fault::UnderSell, |o| o.stock = Some(100)).await;
    assert_eq!(found, only(Invariant::UnderSold));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_won_order_missing_from_the_ledger() {
    let found = violations(Fault::LoseOrder, |o| {
        o.drain_timeout = Duration::from_millis(500);
    })
    .await;
    assert_eq!(found, only(Invariant::WonMissing));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_an_order_listed_twice() {
    let found = violations(Fault::ListTwice, |_| {}).await;
    assert_eq!(found, only(Invariant::OrderDuplicated));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_an_order_that_differs_from_its_answer() {
    let found = violations(Fault::WrongUser, |_| {}).await;
    assert_eq!(found, only(Invariant::WonMismatch));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_orders_nobody_won() {
    let found = violations(Fault::Phantom, |_| {}).await;
    assert_eq!(found, only(Invariant::PhantomOrder));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_wrong_remaining() {
    let found = violations(Fault::RemainingOff, |_| {}).await;
    assert_eq!(found, only(Invariant::RemainingMismatch));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_retry_that_claims_again() {
    let found = violations(Fault::IgnoreKeys, |o| {
        o.limit = Some(2);
        o.clicks = Some(2);
        o.idempotency = true;
    })
    .await;
    assert_eq!(found, only(Invariant::IdempotencyBroken));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_one_order_answered_to_two_claims() {
    let found = violations(Fault::ReuseOrderId, |o| o.clicks = Some(2)).await;
    assert_eq!(found, only(Invariant::WonAnsweredTwice));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catches_a_malformed_claim_that_is_processed() {
    let found = violations(Fault::AcceptsBadInput, |_| {}).await;
    let seven = BTreeSet::from([Invariant::BadInputAccepted, Invariant::BadInputChangedState]);
    assert_eq!(found, seven);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_a_lagging_ledger_to_drain() {
    let found = violations(Fault::SlowLedger, |_| {}).await;
    assert!(found.is_empty(), "{found:?}");
}

/// The binary exits 2 and lists the offending orders when the verifier finds a violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_fails_and_lists_the_oversold_orders() {
    let url = spawn(Fault::Oversell).await;
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args(["bench", "--url", &url, "--admin-token", "t", "--stock", "5"])
            .args(["-n", "8", "-c", "1", "--drain-interval", "50ms"])
            .output()
            .expect("seckill bench runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("FAILED: 1 violation(s)"), "{stdout}");
    assert!(stdout.contains("[invariant 1] Oversold"), "{stdout}");
    // One connection: orders 6, 7 and 8 are the ones past the stock of 5.
    assert!(stdout.contains("orders: bench-seed000-"), "{stdout}");
    assert!(stdout.contains("-6, bench-seed000-"), "{stdout}");
}
