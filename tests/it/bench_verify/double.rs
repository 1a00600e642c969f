//! The test double of the seckill API: an axum app with the routes `seckill bench` uses,
//! honest by default, breaking one invariant per `Fault`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};

use seckill::domain::{CampaignView, ClaimAnswer, Kind, Order, OrderState, Outcome, Status};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
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
        holds: None,
        waiting_room: None,
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
        let reuse = fault == Fault::CodeTwice && c.wins.is_multiple_of(10);
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
        pay_by: None,
        resolved_at: None,
    };
    if fault == Fault::WrongUser && c.wins.is_multiple_of(5) {
        order.user_id = format!("someone-else-{}", c.wins);
    }
    let visible = match fault {
        Fault::SlowLedger => Instant::now() + Duration::from_millis(300),
        _ => Instant::now(),
    };
    if fault == Fault::LoseOrder && c.wins.is_multiple_of(7) {
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
    if fault == Fault::Phantom && c.claims.is_multiple_of(10) {
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
pub async fn spawn(fault: Fault) -> String {
    let d = Arc::new(Double {
        fault,
        camps: Mutex::new(HashMap::new()),
    });
    let app = Router::new()
        .route("/v1/campaigns", post(create))
        .route("/v1/campaigns/{id}", get(view))
        .route("/v1/campaigns/{id}/claims", post(claim))
        .route("/v1/campaigns/{id}/orders", get(orders))
        // Commits before it answers, as the embedded deployment: nothing on its way.
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .with_state(d);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}
