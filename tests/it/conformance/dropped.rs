//! Admin requests whose client disconnects part-way: every operation happens completely (the
//! engine and the ledger both) or not at all, whenever the connection drops.
//!
//! Each request is written to a raw TCP socket that is closed after a delay from 0.1 ms to
//! 50 ms, many times over, for create, restock, pause, resume and cancel at once. Afterwards
//! the engine's view of every campaign (`GET`) must equal the ledger's (read straight from
//! SQLite or PostgreSQL: total, status, and remaining = total − active units), and again after
//! a restart on the same data.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Row;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use seckill::domain::Outcome;

use crate::helpers::{App, Deploy, TOKEN};

crate::conformance!(
    admin_requests_survive_dropped_connections,
    duplicate_creates_never_fail_claims
);

const DELAYS_US: [u64; 10] = [100, 200, 350, 500, 800, 1_200, 2_000, 5_000, 12_000, 50_000];
const ROUNDS: usize = 3;

/// (total, remaining, status) of one campaign.
type View = (u64, u64, String);

/// Sends one admin request on a fresh connection and closes it `after` the request was written.
pub async fn send_and_drop(
    addr: SocketAddr,
    path: &str,
    body: &str,
    key: Option<&str>,
    after: Duration,
) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).unwrap();
    let key = key
        .map(|k| format!("idempotency-key: {k}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: seckill\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n{key}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    if after < Duration::from_millis(2) {
        let until = Instant::now() + after;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    } else {
        tokio::time::sleep(after).await;
    }
    drop(s);
}

/// Every campaign as the ledger holds it, read from its database.
pub async fn ledger_views(app: &App) -> BTreeMap<String, View> {
    const SQL: &str = "SELECT c.id, c.total, c.status, CAST(COALESCE((SELECT SUM(o.qty) \
        FROM orders o WHERE o.campaign_id = c.id AND o.state = 'active'), 0) AS BIGINT) \
        FROM campaigns c ORDER BY c.id";
    let rows: Vec<(String, i64, String, i64)> = match &app.postgres {
        Some(url) => {
            let pool = sqlx::PgPool::connect(url).await.expect("postgres");
            let rows = sqlx::query(SQL)
                .fetch_all(&pool)
                .await
                .expect("read ledger");
            rows.iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect()
        }
        None => {
            let path = app.data_dir().join("seckill.db");
            let url = format!("sqlite://{}?mode=ro", path.display());
            let pool = sqlx::SqlitePool::connect(&url).await.expect("sqlite");
            let rows = sqlx::query(SQL)
                .fetch_all(&pool)
                .await
                .expect("read ledger");
            rows.iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect()
        }
    };
    rows.into_iter()
        .map(|(id, total, status, active)| {
            assert!(active <= total, "{id}: {active} active units of {total}");
            (id, (total as u64, (total - active) as u64, status))
        })
        .collect()
}

/// The engine's view of every campaign in `ids` that it knows.
pub async fn engine_views(app: &App, ids: &[String]) -> BTreeMap<String, View> {
    let mut out = BTreeMap::new();
    for id in ids {
        let (s, v) = app
            .admin(reqwest::Method::GET, &format!("/v1/campaigns/{id}"), None)
            .await;
        match s {
            200 => {
                let view = (
                    v["total"].as_u64().unwrap(),
                    v["remaining"].as_u64().unwrap(),
                    v["status"].as_str().unwrap().to_owned(),
                );
                out.insert(id.clone(), view);
            }
            404 => {}
            other => panic!("GET {id}: {other} {v}"),
        }
    }
    out
}

/// Waits (bounded) until the engine agrees with the ledger on every campaign; returns the
/// agreed views.
pub async fn converge(app: &App, ids: &[String]) -> BTreeMap<String, View> {
    let deadline = Instant::now() + Duration::from_secs(20);
    // A dropped request's operation runs on detached; one that has not reached the ledger yet
    // leaves both sides equal for a moment, so agreement must also hold still for a while.
    let mut agreed: Option<(BTreeMap<String, View>, u32)> = None;
    loop {
        app.settle().await;
        let ledger = ledger_views(app).await;
        let engine = engine_views(app, ids).await;
        if ledger == engine {
            let same = agreed.as_ref().is_some_and(|(v, _)| *v == engine);
            let n = if same {
                agreed.as_ref().unwrap().1 + 1
            } else {
                1
            };
            if n >= 3 {
                return engine;
            }
            assert!(Instant::now() < deadline, "the views never held still");
            agreed = Some((engine, n));
        } else {
            assert!(
                Instant::now() < deadline,
                "the engine and the ledger disagree:\nengine {engine:#?}\nledger {ledger:#?}"
            );
            agreed = None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn admin_requests_survive_dropped_connections(deploy: Deploy) {
    let mut app = App::spawn(deploy).await;
    let users = DELAYS_US.len() * ROUNDS;
    app.create(json!({"id": "rs", "stock": 1})).await;
    app.create(
        json!({"id": "cx", "codes": (0..users).map(|i| format!("K{i}")).collect::<Vec<_>>()}),
    )
    .await;
    app.create(json!({"id": "st", "stock": 10})).await;
    let mut ids: Vec<String> = ["rs", "cx", "st"].map(String::from).to_vec();
    let addr = app.admin_addr();
    let mut n = 0;
    for _ in 0..ROUNDS {
        for us in DELAYS_US {
            let after = Duration::from_micros(us);
            let a = app.claim("cx", &format!("u{n}"), 1).await;
            assert_eq!(a.outcome, Outcome::Won, "{a:?}");
            let order = a.order_id.unwrap();
            let created = format!("new-{n}");
            ids.push(created.clone());
            let status = if n % 2 == 0 { "pause" } else { "resume" };
            let (cancel, switch) = (
                format!("/v1/orders/{order}/cancel"),
                format!("/v1/campaigns/st/{status}"),
            );
            let create = json!({"id": created, "stock": 3}).to_string();
            tokio::join!(
                send_and_drop(
                    addr,
                    "/v1/campaigns/rs/restock",
                    r#"{"units":1}"#,
                    None,
                    after
                ),
                send_and_drop(addr, &cancel, "", None, after),
                send_and_drop(addr, &switch, "", None, after),
                send_and_drop(addr, "/v1/campaigns", &create, None, after),
            );
            n += 1;
        }
    }
    let before = converge(&app, &ids).await;
    let created = before.keys().filter(|k| k.starts_with("new-")).count();
    eprintln!(
        "{deploy:?}: of {n} dropped requests each, {} restocks, {} cancels and {created} creates \
         took effect, wholly",
        before["rs"].0 - 1,
        before["cx"].1
    );
    // The code campaign never sells a code twice: every active order holds distinct codes.
    let orders = app.client.all_orders("cx").await.unwrap();
    let mut codes: Vec<_> = orders
        .iter()
        .filter(|o| o.state == seckill::domain::OrderState::Active)
        .flat_map(|o| o.codes.clone().unwrap_or_default())
        .collect();
    let live = codes.len();
    codes.sort();
    codes.dedup();
    assert_eq!(codes.len(), live, "a code is in two active orders");
    // Every cancelled unit is back on sale: the campaign sells exactly what it shows.
    let remaining = before["cx"].1;
    for i in 0..remaining + 1 {
        let a = app.claim("cx", &format!("late-{i}"), 1).await;
        let want = if i < remaining {
            Outcome::Won
        } else {
            Outcome::SoldOut
        };
        assert_eq!(a.outcome, want, "late claim {i} of {remaining}: {a:?}");
    }
    let before = converge(&app, &ids).await;
    app.restart().await;
    let after = converge(&app, &ids).await;
    assert_eq!(before, after, "a restart changed what the engine shows");
    app.stop().await;
}

/// Creates of an existing campaign raced against a claim storm: the creates are refused
/// before they reach the ledger, so no claim shares a failing group commit with them.
async fn duplicate_creates_never_fail_claims(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "dup", "stock": 400})).await;
    let addr = app.admin_addr();
    let creates = async {
        for i in 0..60u64 {
            if i % 2 == 0 {
                let (s, v) = app
                    .admin(
                        reqwest::Method::POST,
                        "/v1/campaigns",
                        Some(json!({"id": "dup", "stock": 400})),
                    )
                    .await;
                assert_eq!(
                    (s, v["error"]["code"].as_str()),
                    (409, Some("conflict")),
                    "{v}"
                );
            } else {
                let body = json!({"id": "dup", "stock": 400}).to_string();
                send_and_drop(
                    addr,
                    "/v1/campaigns",
                    &body,
                    None,
                    Duration::from_micros(i * 50),
                )
                .await;
            }
        }
    };
    let claims = futures::future::join_all((0..400).map(|i| {
        let client = app.client.clone();
        async move { client.claim("dup", &format!("u{i}"), 1, None).await }
    }));
    let (answers, ()) = tokio::join!(claims, creates);
    for a in answers {
        match a.expect("claim request") {
            seckill::bench::client::ClaimReply::Processed(a) => assert_eq!(a.outcome, Outcome::Won),
            seckill::bench::client::ClaimReply::Refused(s, body) => {
                panic!("claim refused: {s} {body}")
            }
        }
    }
    let views = converge(&app, &["dup".to_owned()]).await;
    assert_eq!(views["dup"], (400, 0, "active".to_owned()));
    app.stop().await;
}
