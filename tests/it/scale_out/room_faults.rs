//! The waiting room in scale-out under faults: users join through two instances while one of
//! them is killed -9 and Redis (AOF `always`) is killed -9 and restarted, on both sides of
//! `starts_at`. Every join that was answered keeps its place: a third instance started after
//! the storm reads every such user, the same answer as the surviving instance, the pre-queue
//! admitted before every later joiner and no two admissions in one millisecond (500 a second).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde_json::{json, Value};

use seckill::bench::client::Client;

use super::procs::Seckill;
use crate::servers::{pg, RedisServer};

async fn join(c: &Client, user: &str) -> Option<Value> {
    let r = c
        .http()
        .post(c.url("/v1/campaigns/line/queue"))
        .json(&json!({"user_id": user}))
        .send()
        .await
        .ok()?;
    (r.status() == 200).then_some(())?;
    r.json().await.ok()
}

async fn status(c: &Client, user: &str) -> Value {
    let r = c
        .http()
        .get(c.url(&format!("/v1/campaigns/line/queue/{user}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{user}");
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answered_joins_keep_their_place_through_an_instance_and_redis_killed() {
    let mut redis = RedisServer::start_aof();
    let db = pg().fresh_db().await;
    let urls = vec![redis.url()];
    let mut a = Seckill::serve(&urls, &db, &[]);
    let b = Seckill::serve(&urls, &db, &["--no-worker"]);
    let starts: DateTime<Utc> = Utc::now() + chrono::TimeDelta::seconds(6);
    b.client()
        .create_campaign(&json!({"id": "line", "stock": 10, "starts_at": starts,
                                 "waiting_room": {"admit_per_second": 500}}))
        .await
        .unwrap();
    let clients = [a.client(), b.client()];
    let stop = Arc::new(AtomicBool::new(false));
    let answered: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (c, stop, answered) = (clients[t % 2].clone(), stop.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let u = format!("t{t}-{i}");
                i += 1;
                if let Some(v) = join(&c, &u).await {
                    answered.lock().insert(u, v);
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.sigkill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.kill_and_restart();
    // On past the start, so later joiners too.
    let left = (starts - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let answered = std::mem::take(&mut *answered.lock());
    let late = answered
        .values()
        .filter(|v| v["state"] != "prequeue")
        .count();
    assert!(
        answered.len() > 200 && late > 0 && late < answered.len(),
        "{} joins answered, {late} of them after the start",
        answered.len()
    );

    // Everyone admitted by now (500 a second), then read through the survivor and through a
    // fresh instance.
    tokio::time::sleep(Duration::from_millis(answered.len() as u64 * 2 + 500)).await;
    let c = Seckill::serve(&urls, &db, &["--no-worker"]);
    let (survivor, fresh) = (b.client(), c.client());
    let mut admitted = Vec::new();
    for (u, told) in &answered {
        let v = status(&survivor, u).await;
        assert_eq!(
            v,
            status(&fresh, u).await,
            "{u}: two instances, two answers"
        );
        assert_eq!(v["state"], "admitted", "{u}: {v}");
        let at: DateTime<Utc> = v["admitted_at"].as_str().unwrap().parse().unwrap();
        let pre = told["state"] == "prequeue";
        admitted.push((at, pre, u.clone()));
    }
    admitted.sort();
    for w in admitted.windows(2) {
        assert!(w[0].0 < w[1].0, "two admissions in one millisecond: {w:?}");
        assert!(
            w[0].1 || !w[1].1,
            "a later joiner before a pre-queue user: {w:?}"
        );
    }
    assert!(
        admitted[0].0 >= starts,
        "admitted before the start: {:?}",
        admitted[0]
    );
}
