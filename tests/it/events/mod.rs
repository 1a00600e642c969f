//! The event feed (`GET /v1/events`, docs/API.md "Events"): every order transition and
//! campaign change once, in the ledger's order, on every deployment; the cursor across a
//! restart; the long poll; retention and its 410; bad queries refused; and, on PostgreSQL,
//! concurrent writers that commit out of order never make a follower skip an event.

mod concurrent;
mod nats;
mod parked;
pub(crate) mod receiver;
mod sink_writes;
pub(crate) mod webhooks;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{settle_url, App, Deploy};

crate::conformance!(the_feed_lists_every_transition_once_in_ledger_order);

/// Reads the whole feed after `after` through pages of `limit`; the events and the last cursor.
pub(crate) async fn read_all(app: &App, after: Option<&str>, limit: u32) -> (Vec<Value>, String) {
    let mut events = Vec::new();
    let mut cursor = after.map(str::to_owned);
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/events?after={c}&limit={limit}"),
            None => format!("/v1/events?limit={limit}"),
        };
        let (status, page) = app.admin(Method::GET, &path, None).await;
        assert_eq!(status, 200, "{page}");
        let got = page["events"].as_array().unwrap().clone();
        let next = page["next_cursor"].as_str().unwrap().to_owned();
        let done = got.len() < limit as usize;
        events.extend(got);
        cursor = Some(next);
        if done {
            return (events, cursor.unwrap());
        }
    }
}

/// Positions follow each other without a gap, from `first`.
fn contiguous(events: &[Value], first: u64) {
    for (i, e) in events.iter().enumerate() {
        let pos: u64 = e["cursor"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            pos,
            first + i as u64,
            "a gap or a repeat in the feed at {e}"
        );
    }
}

async fn the_feed_lists_every_transition_once_in_ledger_order(deploy: Deploy) {
    let mut app = App::spawn(deploy).await;
    app.create(json!({"id": "f", "stock": 6, "per_user_limit": 1, "hold_seconds": 2}))
        .await;
    let mut won = Vec::new();
    for u in ["u1", "u2", "u3", "u4"] {
        let a = app.claim("f", u, 1).await;
        won.push(a.order_id.expect("a win"));
    }
    let (s, _) = app
        .admin(
            Method::POST,
            &format!("/v1/orders/{}/confirm", won[0]),
            None,
        )
        .await;
    assert_eq!(s, 200);
    let (s, _) = app
        .admin(Method::POST, &format!("/v1/orders/{}/cancel", won[1]), None)
        .await;
    assert_eq!(s, 200);
    // The confirmed order is cancelled too: its second transition.
    let (s, _) = app
        .admin(Method::POST, &format!("/v1/orders/{}/cancel", won[0]), None)
        .await;
    assert_eq!(s, 200);
    for (path, body) in [
        ("/v1/campaigns/f/pause", None),
        ("/v1/campaigns/f/resume", None),
        ("/v1/campaigns/f/restock", Some(json!({"units": 2}))),
    ] {
        let (s, v) = app.admin(Method::POST, path, body).await;
        assert_eq!(s, 200, "{path}: {v}");
    }
    // u3 and u4 are never confirmed: both expire after their 2 s.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        settle_url(&app.client).await;
        let (events, _) = read_all(&app, None, 3).await;
        let expired = events
            .iter()
            .filter(|e| e["type"] == "order.expired")
            .count();
        if expired == 2 || Instant::now() > deadline {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    contiguous(&events, 1);
    let mut by_order: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut campaign: Vec<String> = Vec::new();
    let mut ids = HashMap::new();
    for e in &events {
        assert!(ids.insert(e["id"].clone(), ()).is_none(), "id twice: {e}");
        assert_eq!(e["campaign_id"], "f");
        let kind = e["type"].as_str().unwrap().to_owned();
        if let Some(o) = e.get("order") {
            // The order as it stood right after this transition.
            let state = kind.trim_start_matches("order.");
            let want = if state == "won" { "pending" } else { state };
            assert_eq!(o["state"], want, "{e}");
            by_order
                .entry(o["order_id"].as_str().unwrap().to_owned())
                .or_default()
                .push(kind);
        } else {
            campaign.push(kind);
        }
    }
    let want: BTreeMap<String, Vec<String>> = [
        (
            &won[0],
            vec!["order.won", "order.confirmed", "order.cancelled"],
        ),
        (&won[1], vec!["order.won", "order.cancelled"]),
        (&won[2], vec!["order.won", "order.expired"]),
        (&won[3], vec!["order.won", "order.expired"]),
    ]
    .into_iter()
    .map(|(id, k)| (id.clone(), k.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        by_order, want,
        "each order's transitions, once each, in order"
    );
    assert_eq!(
        campaign,
        [
            "campaign.created",
            "campaign.paused",
            "campaign.resumed",
            "campaign.restocked"
        ]
    );
    let restocked = events
        .iter()
        .find(|e| e["type"] == "campaign.restocked")
        .unwrap();
    assert_eq!(restocked["campaign"]["total"], 8, "{restocked}");
    assert_eq!(restocked["campaign"]["status"], "active");

    // Filters, and a page read again from a cursor in its middle.
    let (s, page) = app
        .admin(Method::GET, "/v1/events?type=order.won&limit=1000", None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(page["events"].as_array().unwrap().len(), 4);
    let third = events[2]["cursor"].as_str().unwrap();
    let (rest, last) = read_all(&app, Some(third), 2).await;
    assert_eq!(rest, events[3..], "reading on from a cursor");
    let (s, none) = app
        .admin(Method::GET, "/v1/events?campaign=other", None)
        .await;
    assert_eq!(s, 200);
    assert!(none["events"].as_array().unwrap().is_empty());
    assert_eq!(
        none["next_cursor"],
        last.as_str(),
        "an empty filter reads to the head"
    );

    // The long poll answers soon after a new event, and the cursor survives a restart.
    app.restart().await;
    let (after_restart, _) = read_all(&app, Some(&last), 10).await;
    assert!(after_restart.is_empty(), "{after_restart:?}");
    let poll = {
        let client = app.client.clone();
        let path = format!("/v1/events?after={last}&wait_ms=20000&type=order.won");
        tokio::spawn(async move {
            let t = Instant::now();
            let (s, v) = client.admin(Method::GET, &path, None).await.unwrap();
            (s.as_u16(), v, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fired = Instant::now();
    let a = app.claim("f", "u5", 1).await;
    let (s, page, waited) = poll.await.unwrap();
    assert_eq!(s, 200, "{page}");
    let got = page["events"].as_array().unwrap();
    assert_eq!(got.len(), 1, "{page}");
    assert_eq!(got[0]["order"]["order_id"], json!(a.order_id));
    let after_claim = fired.elapsed();
    assert!(
        waited >= Duration::from_millis(1400),
        "the poll waited for the event ({waited:?})"
    );
    // Scale-out: the win reaches the ledger through the pipeline first.
    assert!(
        after_claim < Duration::from_secs(5),
        "answered {after_claim:?} after the claim"
    );
    assert_eq!(
        got[0]["cursor"].as_str().unwrap().parse::<u64>().unwrap(),
        last.parse::<u64>().unwrap() + 1,
        "numbering goes on after the restart"
    );
    app.stop().await;
}

#[tokio::test]
async fn bad_queries_are_refused_and_old_cursors_answer_410() {
    let app = App::spawn_with(|cfg| cfg.events_retention = Duration::from_secs(1)).await;
    app.create(json!({"id": "r", "stock": 5, "per_user_limit": 5}))
        .await;
    for path in [
        "/v1/events?after=01",
        "/v1/events?after=-1",
        "/v1/events?after=abc",
        "/v1/events?after=99",
        "/v1/events?limit=0",
        "/v1/events?limit=1001",
        "/v1/events?type=order.shipped",
        "/v1/events?wait_ms=30001",
        "/v1/events?campaign=",
        "/v1/events?unknown=1",
    ] {
        let (status, code) = app.refusal(Method::GET, path, None).await;
        assert_eq!((status, code.as_str()), (400, "invalid_request"), "{path}");
    }
    let (events, last) = read_all(&app, None, 10).await;
    assert_eq!(events.len(), 1);
    assert_eq!(last, "1");
    // Retention (1 s here) removes the event; its cursor is then too old.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = app.admin(Method::GET, "/v1/events?after=0", None).await;
        if status == 410 {
            assert_eq!(body["error"]["code"], "cursor_expired", "{body}");
            let msg = body["error"]["message"].as_str().unwrap();
            assert!(msg.contains("cursor 0") && msg.contains("after=1"), "{msg}");
            break;
        }
        assert_eq!(status, 200, "{body}");
        assert!(Instant::now() < deadline, "the event was never removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // From the start now: nothing, and the next event takes the next position.
    let (events, last) = read_all(&app, None, 10).await;
    assert!(events.is_empty());
    assert_eq!(last, "1");
    app.claim("r", "u", 1).await;
    let (events, _) = read_all(&app, Some("1"), 10).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["cursor"], "2");
    let (s, _) = app
        .client
        .http()
        .get(app.client.url("/v1/events"))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(s, 401, "the feed needs the admin token");
    app.stop().await;
}

/// Embedded: a pause in the middle of a storm comes after every win decided before it, in the
/// feed as in the engine (the group commit writes a batch in the order the engine decided it),
/// no win follows it, and it shows the campaign as the pause's answer did.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_mid_storm_follows_every_win_decided_before_it() {
    let app = App::spawn_with(|_| {}).await;
    app.create(json!({"id": "p", "stock": 1_000_000, "per_user_limit": 1}))
        .await;
    let storm: Vec<_> = (0..8)
        .map(|w| {
            let client = app.client.clone();
            tokio::spawn(async move {
                for i in 0..400 {
                    let _ = client.claim("p", &format!("w{w}-{i}"), 1, None).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, paused) = app.admin(Method::POST, "/v1/campaigns/p/pause", None).await;
    assert_eq!(s, 200, "{paused}");
    for t in storm {
        t.await.unwrap();
    }
    let (events, _) = read_all(&app, None, 1000).await;
    let at = events
        .iter()
        .position(|e| e["type"] == "campaign.paused")
        .expect("the pause is in the feed");
    let wins_before = events[..at]
        .iter()
        .filter(|e| e["type"] == "order.won")
        .count();
    let wins_after = events[at..]
        .iter()
        .filter(|e| e["type"] == "order.won")
        .count();
    assert!(wins_before > 0, "the storm won before the pause");
    assert_eq!(
        wins_after, 0,
        "a win listed after the pause that stopped the sale"
    );
    assert_eq!(
        events[at]["campaign"]["remaining"], paused["remaining"],
        "the pause's event shows the campaign as its answer did"
    );
    app.stop().await;
}

/// `seckill events tail --no-follow` prints the feed as JSON lines, from a cursor and filtered.
/// (Two workers: the child's wait blocks one while the in-process server answers on the other.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tail_prints_the_feed_as_json_lines() {
    let app = App::spawn_with(|_| {}).await;
    app.create(json!({"id": "t", "stock": 5, "per_user_limit": 1}))
        .await;
    for u in ["a", "b", "c"] {
        app.claim("t", u, 1).await;
    }
    let tail = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args(["events", "tail", "--no-follow", "--url", &app.admin_url()])
            .args(args)
            .env("SECKILL_ADMIN_TOKEN", crate::helpers::TOKEN)
            .env("RUST_LOG", "warn")
            .output()
            .expect("seckill runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
            .collect::<Vec<_>>()
    };
    let all = tail(&[]);
    let kinds: Vec<&str> = all.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["campaign.created", "order.won", "order.won", "order.won"]
    );
    let after_first_win = tail(&["--after", "2", "--type", "order.won"]);
    assert_eq!(after_first_win, all[2..]);
    app.stop().await;
}
