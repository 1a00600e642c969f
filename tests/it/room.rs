//! The waiting room (docs/WAITING_ROOM.md) on every deployment: a pre-queue shuffled at
//! `starts_at`, admissions at the room's rate, later joiners behind it in arrival order,
//! claims only with a valid ticket, places and tickets unchanged across a restart, `sold_out`
//! for those still waiting once the stock is gone, and bad input refused.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{App, Deploy};

crate::conformance!(
    the_room_shuffles_admits_at_its_rate_and_only_tickets_claim,
    waiting_users_learn_the_sale_sold_out,
    a_line_drawn_while_joins_are_written_is_the_line_a_restart_draws,
);

async fn join(app: &App, campaign: &str, user: &str) -> (StatusCode, Value) {
    crate::helpers::queue_join(&app.client, campaign, user).await
}

async fn status(app: &App, campaign: &str, user: &str) -> (StatusCode, Value) {
    crate::helpers::queue_read(&app.client, campaign, user).await
}

async fn claim(app: &App, campaign: &str, user: &str, ticket: Option<&str>) -> (StatusCode, Value) {
    let c = &app.client;
    let mut req = c
        .http()
        .post(c.url(&format!("/v1/campaigns/{campaign}/claims")))
        .json(&json!({"user_id": user}));
    if let Some(t) = ticket {
        req = req.header("X-Seckill-Ticket", t);
    }
    let r = req.send().await.unwrap();
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

fn starts_in(d: Duration) -> String {
    (Utc::now() + d).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

async fn until(at: &str) {
    let at: DateTime<Utc> = at.parse().unwrap();
    let left = at - Utc::now();
    if let Ok(d) = left.to_std() {
        tokio::time::sleep(d).await;
    }
}

async fn statuses(app: &App, campaign: &str, users: &[String]) -> HashMap<String, Value> {
    let mut all = HashMap::new();
    for u in users {
        let (s, v) = status(app, campaign, u).await;
        assert_eq!(s, 200, "{u}: {v}");
        all.insert(u.clone(), v);
    }
    all
}

async fn the_room_shuffles_admits_at_its_rate_and_only_tickets_claim(deploy: Deploy) {
    let mut app = App::spawn(deploy).await;
    let starts = starts_in(Duration::from_secs(3));
    let view = app
        .create(json!({"id": "w", "stock": 100, "starts_at": starts,
                       "waiting_room": {"admit_per_second": 10, "ticket_seconds": 60}}))
        .await;
    let room = view.waiting_room.expect("the view shows the room");
    assert_eq!(
        (room.admit_per_second, room.ticket_seconds, room.shuffle),
        (10, 60, true)
    );
    app.create(json!({"id": "other", "stock": 5, "waiting_room": {"admit_per_second": 100}}))
        .await;
    app.create(json!({"id": "open", "stock": 5})).await;

    // The pre-queue, joined one after the other; joining again is the same place.
    let users: Vec<String> = (0..30).map(|i| format!("u{i:02}")).collect();
    for u in &users {
        let (s, v) = join(&app, "w", u).await;
        assert_eq!(
            (s.as_u16(), v["state"].as_str()),
            (200, Some("prequeue")),
            "{v}"
        );
    }
    let (_, again) = join(&app, "w", "u00").await;
    assert_eq!(again["state"], "prequeue");

    // Bad input and refusals change nothing.
    assert_eq!(status(&app, "w", "nobody").await.0, 404);
    assert_eq!(status(&app, "open", "u00").await.0, 404, "no room there");
    assert_eq!(join(&app, "missing", "u00").await.0, 404);
    assert_eq!(join(&app, "w", "").await.0, 400);
    let (s, v) = claim(&app, "w", "u00", None).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (403, Some("not_admitted")),
        "{v}"
    );
    let (s, v) = claim(&app, "w", "u00", Some("t1.99999999999999.AAAA")).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (403, Some("not_admitted")),
        "{v}"
    );
    assert_eq!(
        claim(&app, "open", "u00", None).await.0,
        200,
        "a campaign without a room"
    );

    // After the start: places drawn, admitted at 10 a second.
    until(&starts).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let first = statuses(&app, "w", &users).await;
    let admitted: Vec<&Value> = first
        .values()
        .filter(|v| v["state"] == "admitted")
        .collect();
    let waiting: Vec<u64> = first
        .values()
        .filter(|v| v["state"] == "waiting")
        .map(|v| v["position"].as_u64().unwrap())
        .collect();
    assert_eq!(admitted.len() + waiting.len(), users.len(), "{first:?}");
    assert!(
        (10..=20).contains(&admitted.len()),
        "1.2 s at 10/s admits 13 or so, not {}",
        admitted.len()
    );
    // Each read is at its own moment: a waiting user's estimated wait is within one spacing
    // (100 ms) of its position, as the schedule makes it.
    for v in first.values().filter(|v| v["state"] == "waiting") {
        let p = v["position"].as_u64().unwrap();
        let w = v["estimated_wait_ms"].as_u64().unwrap();
        assert!((p - 1) * 100 < w && w <= p * 100, "{v}");
    }

    // A later joiner queues behind the whole pre-queue.
    let (_, late) = join(&app, "w", "late").await;
    assert_eq!(late["state"], "waiting", "{late}");
    // Behind everyone still waiting (some may have been admitted since they were read): its
    // wait is that of the whole rest of the pre-queue, and it is admitted last (below).
    let place = late["position"].as_u64().unwrap();
    let wait = late["estimated_wait_ms"].as_u64().unwrap();
    assert!(place <= waiting.len() as u64 + 1, "{late}");
    assert!((place - 1) * 100 < wait && wait <= place * 100, "{late}");

    // Places and tickets survive a restart unchanged.
    app.restart().await;
    let mut all = users.clone();
    all.push("late".into());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = statuses(&app, "w", &all).await;
    for (u, v) in &first {
        if v["state"] == "admitted" {
            assert_eq!(&after[u], v, "{u}: the same ticket after the restart");
        }
    }
    // Everyone is admitted by now; the admission order is a shuffle of the join order, at
    // most 10 a second, the later joiner last.
    let mut order: Vec<(DateTime<Utc>, String)> = after
        .iter()
        .map(|(u, v)| {
            assert_eq!(v["state"], "admitted", "{u}: {v}");
            (
                v["admitted_at"].as_str().unwrap().parse().unwrap(),
                u.clone(),
            )
        })
        .collect();
    order.sort();
    assert_eq!(order.last().unwrap().1, "late");
    let joined: Vec<&String> = users.iter().collect();
    let drawn: Vec<&String> = order.iter().map(|(_, u)| u).take(users.len()).collect();
    assert_ne!(joined, drawn, "the pre-queue was shuffled");
    assert!(
        order[0].0 >= starts.parse::<DateTime<Utc>>().unwrap(),
        "nobody before the start"
    );
    for w in order.windows(2) {
        assert!(
            w[1].0 - w[0].0 >= chrono::TimeDelta::milliseconds(100),
            "two admissions closer than 1/rate: {w:?}"
        );
    }

    // The ticket admits its own user only, once per the per-user limit.
    let ticket = |u: &str| after[u]["ticket"].as_str().unwrap().to_owned();
    let (s, v) = claim(&app, "w", "u01", Some(&ticket("u02"))).await;
    assert_eq!(
        (s.as_u16(), v["error"]["code"].as_str()),
        (403, Some("not_admitted")),
        "{v}"
    );
    let (_, o) = join(&app, "other", "u01").await;
    assert_eq!(o["state"], "admitted", "an empty line admits at once: {o}");
    let (s, _) = claim(&app, "w", "u01", o["ticket"].as_str()).await;
    assert_eq!(s, 403, "a ticket of another campaign");
    let (s, v) = claim(&app, "w", "u01", Some(&ticket("u01"))).await;
    assert_eq!(
        (s.as_u16(), v["outcome"].as_str()),
        (200, Some("won")),
        "{v}"
    );
    let (s, v) = claim(&app, "w", "u01", Some(&ticket("u01"))).await;
    assert_eq!(
        (s.as_u16(), v["outcome"].as_str()),
        (200, Some("already_claimed")),
        "{v}"
    );
    let (_, c) = app
        .admin(reqwest::Method::GET, "/v1/campaigns/w", None)
        .await;
    assert_eq!(c["remaining"], 99, "{c}");

    // The room in /metrics and on the dashboard.
    let (_, samples) = crate::metrics::scrape(&app.admin_url()).await;
    let of_w = |name| crate::metrics::total(&samples, name, &[("campaign", "w")]);
    assert_eq!(of_w("seckill_room_joined"), 31.0);
    assert_eq!(of_w("seckill_room_admitted"), 31.0);
    assert_eq!(of_w("seckill_room_waiting"), 0.0);
    let refused = crate::metrics::total(&samples, "seckill_room_tickets_refused_total", &[]);
    assert_eq!(refused, 2.0, "two refusals since the restart");
    let (_, d) = app
        .admin(reqwest::Method::GET, "/dashboard/data", None)
        .await;
    let rooms = d["rooms"].as_array().unwrap();
    let w = rooms
        .iter()
        .find(|r| r["campaign"] == "w")
        .expect("w on the dashboard");
    assert_eq!(
        (w["joined"].as_u64(), w["admit_per_second"].as_u64()),
        (Some(31), Some(10))
    );
    app.stop().await;
}

async fn waiting_users_learn_the_sale_sold_out(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    let starts = starts_in(Duration::from_secs(2));
    app.create(json!({"id": "one", "stock": 1, "starts_at": starts,
                      "waiting_room": {"admit_per_second": 1, "shuffle": false}}))
        .await;
    for u in ["a", "b", "c"] {
        assert_eq!(join(&app, "one", u).await.1["state"], "prequeue");
    }
    until(&starts).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Unshuffled: join order.
    let (_, a) = status(&app, "one", "a").await;
    assert_eq!(a["state"], "admitted", "{a}");
    let (_, b) = status(&app, "one", "b").await;
    assert_eq!(
        (b["state"].as_str(), b["position"].as_u64()),
        (Some("waiting"), Some(1)),
        "{b}"
    );
    let (_, v) = claim(&app, "one", "a", a["ticket"].as_str()).await;
    assert_eq!(v["outcome"], "won", "{v}");
    for u in ["b", "c"] {
        assert_eq!(status(&app, "one", u).await.1["state"], "sold_out");
    }
    let (s, v) = join(&app, "one", "d").await;
    assert_eq!(
        (s.as_u16(), v["state"].as_str()),
        (200, Some("sold_out")),
        "{v}"
    );
    assert_eq!(
        status(&app, "one", "d").await.0,
        404,
        "a join after the sale records nothing"
    );
    app.stop().await;
}

/// Joins keep coming across `starts_at` while readers poll, so the pre-queue is drawn while
/// joins timed before the start are still being written; a restart replays the ledger's joins
/// and must draw exactly the line that was told.
async fn a_line_drawn_while_joins_are_written_is_the_line_a_restart_draws(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    let starts = starts_in(Duration::from_millis(1_500));
    let start: DateTime<Utc> = starts.parse().unwrap();
    app.create(json!({"id": "edge", "stock": 10, "starts_at": starts,
                      "waiting_room": {"admit_per_second": 2000}}))
        .await;
    let app = std::sync::Arc::new(tokio::sync::RwLock::new(app));
    let mut tasks = Vec::new();
    for t in 0..12 {
        let app = app.clone();
        let until = start + chrono::TimeDelta::milliseconds(300);
        tasks.push(tokio::spawn(async move {
            let mut users = Vec::new();
            let mut pre = 0;
            for i in 0.. {
                let u = format!("j{t}-{i}");
                let a = app.read().await;
                let (s, v) = join(&a, "edge", &u).await;
                assert_eq!(s, 200, "{v}");
                pre += usize::from(v["state"] == "prequeue");
                users.push(u);
                if Utc::now() > until {
                    break;
                }
                // Paced until just before the start, at full speed across it.
                if Utc::now() < start - chrono::TimeDelta::milliseconds(200) {
                    tokio::time::sleep(Duration::from_millis(4)).await;
                }
            }
            (users, pre)
        }));
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut pollers = Vec::new();
    for t in 0..4 {
        let (app, stop) = (app.clone(), stop.clone());
        pollers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let a = app.read().await;
                let _ = status(&a, "edge", &format!("j{t}-0")).await;
            }
        }));
    }
    let (mut users, mut pre) = (Vec::new(), 0);
    for t in tasks {
        let (u, p) = t.await.unwrap();
        users.extend(u);
        pre += p;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for p in pollers {
        p.await.unwrap();
    }
    let mut app = std::sync::Arc::into_inner(app).unwrap().into_inner();
    // Everyone admitted (2,000 a second), then every answer read, the server restarted and
    // every answer read again.
    tokio::time::sleep(Duration::from_millis(users.len() as u64 / 2 + 500)).await;
    let before = statuses(&app, "edge", &users).await;
    assert!(
        pre > 0 && pre < users.len(),
        "joins on both sides of the start: {pre} of {}",
        users.len()
    );
    app.restart().await;
    let after = statuses(&app, "edge", &users).await;
    let moved: Vec<&String> = users.iter().filter(|u| before[*u] != after[*u]).collect();
    assert!(
        moved.is_empty(),
        "{} of {} users answered differently after the restart, e.g. {:?}: {} then {}",
        moved.len(),
        users.len(),
        moved.first(),
        moved.first().map(|u| &before[*u]).unwrap_or(&Value::Null),
        moved.first().map(|u| &after[*u]).unwrap_or(&Value::Null),
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joins_and_reads_count_against_the_claim_rate_limits() {
    let app = App::spawn_tuned(Deploy::Embedded, |c| {
        c.guard.rate_per_ip = Some("5/h".parse().unwrap());
    })
    .await;
    app.create(json!({"id": "rl", "stock": 5, "waiting_room": {"admit_per_second": 10}}))
        .await;
    let mut answers = Vec::new();
    for i in 0..8 {
        answers.push(join(&app, "rl", &format!("bot{i}")).await.0.as_u16());
    }
    assert_eq!(&answers[..5], &[200; 5], "{answers:?}");
    assert!(answers[5..].iter().all(|s| *s == 429), "{answers:?}");
    assert_eq!(status(&app, "rl", "bot0").await.0, 429);
    assert_eq!(
        status(&app, "rl", "bot7").await.0,
        429,
        "refused, not recorded"
    );
    app.stop().await;
}
