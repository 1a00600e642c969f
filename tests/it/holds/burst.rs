//! A burst of payment callbacks: thousands of confirms of one campaign at once, every order
//! confirmed twice, half of them already past `pay_by`. Confirms are committed in batches
//! (src/engine/embedded/confirm.rs), and batching must not change a single answer: every
//! order ends in exactly one state that agrees with both of its answers.

use std::collections::HashMap;
use std::time::Duration;

use futures::{stream, StreamExt};
use rand::seq::SliceRandom;
use serde_json::json;

use seckill::domain::{OrderState, Outcome};

use super::{clocked, confirm, until_nothing_pending};
use crate::helpers::App;

const PER_WAVE: usize = 1_000;

async fn win_wave(app: &App, wave: usize) -> Vec<String> {
    stream::iter(0..PER_WAVE)
        .map(|i| async move {
            let a = app.claim("burst", &format!("w{wave}u{i}"), 1).await;
            assert_eq!(a.outcome, Outcome::Won);
            a.order_id.unwrap()
        })
        .buffer_unordered(32)
        .collect()
        .await
}

/// Samples of `name` in the server's `/metrics`.
async fn metric(app: &App, name: &str) -> u64 {
    let text = app
        .client
        .http()
        .get(app.client.url("/metrics"))
        .bearer_auth(crate::helpers::TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    seckill::guard::metrics::sample(&text, name).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_confirms_is_committed_in_batches_and_answers_each_order_once() {
    let (app, clock) = clocked().await;
    app.create(
        json!({"id": "burst", "stock": 2 * PER_WAVE, "per_user_limit": 1, "hold_seconds": 60}),
    )
    .await;
    let early = win_wave(&app, 0).await;
    clock.advance(Duration::from_secs(30));
    let late = win_wave(&app, 1).await;
    // The first wave's deadline has passed (nothing swept yet is fine: the deadline decides),
    // the second's is 29 s away.
    clock.advance(Duration::from_secs(31));

    let commits_before = metric(&app, "seckill_group_commit_batch_size_count").await;
    let mut calls: Vec<&String> = early
        .iter()
        .chain(&late)
        .chain(&early)
        .chain(&late)
        .collect();
    calls.shuffle(&mut rand::thread_rng());
    let answers: Vec<(String, u16, serde_json::Value)> = stream::iter(calls)
        .map(|id| {
            let app = &app;
            async move {
                let (status, body) = confirm(app, id).await;
                (id.clone(), status, body)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let commits = metric(&app, "seckill_group_commit_batch_size_count").await - commits_before;

    let mut by_order: HashMap<&str, Vec<u16>> = HashMap::new();
    for (id, status, body) in &answers {
        let expected = if early.contains(id) { 409 } else { 200 };
        assert_eq!(*status, expected, "confirm of {id}: {body}");
        by_order.entry(id).or_default().push(*status);
    }
    assert_eq!(by_order.len(), 2 * PER_WAVE);
    for id in &early {
        let o = app.client.order(id).await.unwrap().expect("order");
        assert_eq!(o.state, OrderState::Expired, "{id}");
    }
    for id in &late {
        let o = app.client.order(id).await.unwrap().expect("order");
        assert_eq!(o.state, OrderState::Confirmed, "{id}");
    }
    let v = until_nothing_pending(&app, "burst").await;
    assert_eq!(
        v.remaining, PER_WAVE as u64,
        "the expired wave's units are back"
    );
    let resolutions = super::race::resolutions(app.data_dir(), "burst").await;
    assert_eq!(resolutions.len(), 2 * PER_WAVE);
    assert!(
        resolutions.values().all(|&n| n == 1),
        "one resolution per order"
    );
    // How much batching saves is measured, not asserted (it depends on how fast the commits
    // are against how fast the confirms arrive); the count is printed.
    eprintln!(
        "confirm burst: {commits} group commits for {} confirms",
        4 * PER_WAVE
    );
}
