//! The bench's verifier, tested against a deployment that breaks the rules on purpose.
//!
//! `Double` is a small axum app serving the API routes the bench uses (create, view, claim,
//! orders). Run honestly it passes; each `Fault` makes it violate one invariant, and each test
//! runs the real `seckill::bench::run` against it and asserts the verifier reports exactly
//! that violation, with the offending orders.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};

use seckill::bench::{self, BenchOpts, Invariant, ScenarioName};
use seckill::domain::{CampaignView, ClaimAnswer, Kind, Order, OrderState, Outcome, Status};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Wins past the stock.
    Oversell,
    /// Every 10th win hands out the previous code again.
    CodeTwice,
    /// Ignores the per-user limit.
    OverLimit,
    /// Answers sold_out once half the stock is sold.
    UnderSell,
    /// Every 7th win is answered but never written to the ledger (its unit is put back).
    LoseOrder,
    /// The ledger lists its first order twice.
    ListTwice,
    /// Every 5th order is written under another user.
    WrongUser,
    /// Every 10th claim answers already_claimed but writes an order anyway.
    Phantom,
    /// The view reports one unit more than remains.
    RemainingOff,
    /// Ignores Idempotency-Key: every retry claims again.
    IgnoreKeys,
    /// A repeat click gets the order id of the user's first win instead of already_claimed.
    ReuseOrderId,
    /// Orders show up in the ledger 300 ms after the answer (a lagging pipeline, no violation).
    SlowLedger,
    /// Processes claims with an empty user id instead of refusing them.
    AcceptsBadInput,
}

struct Camp {
    view: CampaignView,
    codes: Vec<String>,
    next_code: usize,
    held: HashMap<String, (u64, String)>,
    seq: u64,
    wins: u64,
    claims: u64,
    orders: Vec<(Instant, Order)>,
    keys: HashMap<(String, String), ClaimAnswer>,
}

struct Double {
    fault: Fault,
    camps: Mutex<HashMap<String, Camp>>,
}

type App = State<Arc<Double>>;

async fn create(State(d): App, Json(b): Json<Value>) -> (StatusCode, Json<CampaignView>) {
    let id = b["id"].as_str().unwrap().to_owned();
    let codes: Vec<String> = b["codes"]
        .as_array()
        .map(|a| a.iter().map(|c| c.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    let total = b["stock"].as_u64().unwrap_or(codes.len() as u64);
    let view = CampaignView {
        id: id.clone(),
        kind: if codes.is_empty() {
            Kind::Stock
        } else {
            Kind::Codes
        },
        total,
        remaining: total,
        per_user_limit: b["per_user_limit"].as_u64().unwrap_or(1),
        status: Status::Active,
        starts_at: None,
        ends_at: None,
    };
    let camp = Camp {
        view: view.clone(),
        codes,
        next_code: 0,
        held: HashMap::new(),
        seq: 0,
        wins: 0,
        claims: 0,
        orders: Vec::new(),
        keys: HashMap::new(),
    };
    d.camps.lock().insert(id, camp);
    (StatusCode::CREATED, Json(view))
}

async fn view(State(d): App, Path(id): Path<String>) -> Json<CampaignView> {
    let camps = d.camps.lock();
    let mut v = camps[&id].view.clone();
    if d.fault == Fault::RemainingOff {
        v.remaining += 1;
    }
    Json(v)
}

#[derive(Deserialize)]
struct ClaimBody {
    user_id: String,
    qty: u64,
}

async fn claim(
    State(d): App,
    Path(id): Path<String>,
    headers: HeaderMap,
    Json(b): Json<ClaimBody>,
) -> (StatusCode, Json<Value>) {
    if (b.user_id.is_empty() && d.fault != Fault::AcceptsBadInput) || b.qty == 0 {
        let e = json!({"error": {"code": "invalid_request", "message": "bad claim"}});
        return (StatusCode::BAD_REQUEST, Json(e));
    }
    let mut camps = d.camps.lock();
    let c = camps.get_mut(&id).unwrap();
    let key = headers
        .get("idempotency-key")
        .map(|k| (b.user_id.clone(), k.to_str().unwrap().to_owned()));
    if d.fault != Fault::IgnoreKeys {
        if let Some(a) = key.as_ref().and_then(|k| c.keys.get(k)) {
            return (StatusCode::OK, Json(json!(a)));
        }
    }
    let answer = decide(d.fault, c, &b.user_id, b.qty);
    if let Some(k) = key {
        c.keys.insert(k, answer.clone());
    }
    (StatusCode::OK, Json(json!(answer)))
}

fn decide(fault: Fault, c: &mut Camp, user: &str, qty: u64) -> ClaimAnswer {
    c.claims += 1;
    let held = c.held.get(user).map(|h| h.0).unwrap_or(0);
    if held + qty > c.view.per_user_limit && fault != Fault::OverLimit {
        if fault == Fault::ReuseOrderId {
            let (_, first) = &c.held[user];
            return ClaimAnswer {
                order_id: Some(first.clone()),
                qty: Some(qty),
                ..ClaimAnswer::bare(Outcome::Won)
            };
        }
        return ClaimAnswer {
            held: Some(held),
            ..ClaimAnswer::bare(Outcome::AlreadyClaimed)
        };
    }
    let sold = c.view.total - c.view.remaining;
    let under = fault == Fault::UnderSell && sold * 2 >= c.view.total;
    if (c.view.remaining < qty && fault != Fault::Oversell) || under {
        return ClaimAnswer {
            remaining: Some(c.view.remaining),
            ..ClaimAnswer::bare(Outcome::SoldOut)
        };
    }
    c.view.remaining = c.view.remaining.saturating_sub(qty);
    c.seq += 1;
    c.wins += 1;
    let order_id = format!("{}-{}", c.view.id, c.seq);
    let codes = (c.view.kind == Kind::Codes).then(|| {
        let reuse = fault == Fault::CodeTwice && c.wins % 10 == 0;
        if !reuse {
            c.next_code += 1;
        }
        vec![c.codes[c.next_code - 1].clone()]
    });
    let entry = c
        .held
        .entry(user.to_owned())
        .or_insert((0, order_id.clone()));
    entry.0 += qty;
    let mut order = Order {
        order_id: order_id.clone(),
        campaign_id: c.view.id.clone(),
        user_id: user.to_owned(),
        qty,
        codes: codes.clone(),
        state: OrderState::Active,
        created_at: chrono::Utc::now(),
        cancelled_at: None,
    };
    if fault == Fault::WrongUser && c.wins % 5 == 0 {
        order.user_id = format!("someone-else-{}", c.wins);
    }
    let visible = match fault {
        Fault::SlowLedger => Instant::now() + Duration::from_millis(300),
        _ => Instant::now(),
    };
    if fault == Fault::LoseOrder && c.wins % 7 == 0 {
        c.view.remaining += qty;
        c.held.remove(user);
    } else {
        c.orders.push((visible, order));
    }
    let answer = ClaimAnswer {
        order_id: Some(order_id),
        qty: Some(qty),
        codes,
        ..ClaimAnswer::bare(Outcome::Won)
    };
    if fault == Fault::Phantom && c.claims % 10 == 0 {
        return ClaimAnswer::bare(Outcome::AlreadyClaimed);
    }
    answer
}

#[derive(Deserialize)]
struct Page {
    cursor: Option<usize>,
    limit: Option<usize>,
}

async fn orders(State(d): App, Path(id): Path<String>, Query(p): Query<Page>) -> Json<Value> {
    let camps = d.camps.lock();
    let now = Instant::now();
    let mut list: Vec<&Order> = camps[&id]
        .orders
        .iter()
        .filter(|(at, _)| *at <= now)
        .map(|(_, o)| o)
        .collect();
    if d.fault == Fault::ListTwice && !list.is_empty() {
        list.insert(1, list[0]);
    }
    let from = p.cursor.unwrap_or(0);
    let limit = p.limit.unwrap_or(100);
    let page: Vec<&Order> = list.iter().skip(from).take(limit).copied().collect();
    let next = (from + limit < list.len()).then(|| (from + limit).to_string());
    Json(json!({"orders": page, "next_cursor": next}))
}

/// Serves the double on a free port; returns its URL.
async fn spawn(fault: Fault) -> String {
    let d = Arc::new(Double {
        fault,
        camps: Mutex::new(HashMap::new()),
    });
    let app = Router::new()
        .route("/v1/campaigns", post(create))
        .route("/v1/campaigns/{id}", get(view))
        .route("/v1/campaigns/{id}/claims", post(claim))
        .route("/v1/campaigns/{id}/orders", get(orders))
        .with_state(d);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

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
