//! The exposition of a live embedded server: every family present, counts that match the
//! answers of a concurrent storm, and a label set that a flood of made-up ids cannot grow.

use std::collections::HashSet;

use futures::future::join_all;
use serde_json::json;

use super::{scrape, total};
use crate::guards::claim_as;
use crate::helpers::{App, Deploy};
use seckill::telemetry::catalog;

/// Families an embedded server shows (the rest need Redis/PostgreSQL).
const SCALE_OUT_ONLY: &[&str] = &[
    catalog::REDIS_SCRIPT_DURATION,
    catalog::PIPELINE_BATCH,
    catalog::PIPELINE_INSERT_DURATION,
    catalog::PIPELINE_REFUSED,
    catalog::PIPELINE_LAG,
    catalog::REDIS_SETTINGS,
    catalog::REDIS_REFUSING,
];

fn names(samples: &[seckill::telemetry::exposition::Sample]) -> HashSet<String> {
    samples
        .iter()
        .map(|s| {
            let n = s.name.as_str();
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suf| n.strip_suffix(suf))
                .unwrap_or(n);
            base.to_owned()
        })
        .collect()
}

/// 200 concurrent claims on 20 units: the claim counters and the latency histogram count
/// exactly the answers given, and every documented family is exposed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storm_counts_match_the_answers() {
    let app = App::spawn(Deploy::Embedded).await;
    app.create(json!({"id": "mx", "stock": 20, "per_user_limit": 1}))
        .await;
    let base = app.admin_url();
    let answers = join_all((0..200).map(|i| {
        let base = base.clone();
        async move { claim_as(&base, "mx", &format!("u{i}")).await }
    }))
    .await;
    let won = answers
        .iter()
        .filter(|(s, v)| s.as_u16() == 200 && v["outcome"] == "won")
        .count();
    let sold_out = answers
        .iter()
        .filter(|(s, v)| s.as_u16() == 200 && v["outcome"] == "sold_out")
        .count();
    assert_eq!((won, sold_out), (20, 180), "every claim answered");

    let (text, samples) = scrape(&base).await;
    let claims = |o: &str| {
        total(
            &samples,
            catalog::CLAIMS,
            &[("campaign", "mx"), ("outcome", o)],
        )
    };
    assert_eq!(claims("won"), 20.0, "{text}");
    assert_eq!(claims("sold_out"), 180.0);
    assert_eq!(
        total(&samples, catalog::CLAIMS, &[("campaign", "mx")]),
        200.0
    );
    let latency = format!("{}_count", catalog::HTTP_DURATION);
    assert_eq!(total(&samples, &latency, &[("route", "claim")]), 200.0);
    assert_eq!(
        total(
            &samples,
            &latency,
            &[("route", "claim"), ("outcome", "won")]
        ),
        20.0
    );
    assert_eq!(
        total(&samples, catalog::CAMPAIGN_REMAINING, &[("campaign", "mx")]),
        0.0
    );
    // The campaign view and /healthz are timed by route template, never by raw path.
    app.client.campaign("mx").await.unwrap();
    let (_, samples) = scrape(&base).await;
    assert!(
        total(
            &samples,
            &latency,
            &[("route", "/v1/campaigns/{id}"), ("outcome", "2xx")]
        ) >= 1.0
    );
    // The group commit ran for the 20 wins (process-wide series: at least this server's).
    let commits = format!("{}_count", catalog::COMMIT_BATCH);
    assert!(total(&samples, &commits, &[]) >= 1.0);
    // A room's series exist once a campaign has a room: one user joins, and a claim without
    // its ticket is refused.
    app.create(json!({"id": "mxr", "stock": 1, "waiting_room": {"admit_per_second": 1}}))
        .await;
    let joined = app
        .client
        .http()
        .post(app.client.url("/v1/campaigns/mxr/queue"))
        .json(&json!({"user_id": "u0"}))
        .send()
        .await
        .unwrap();
    assert_eq!(joined.status(), 200);
    assert_eq!(claim_as(&base, "mxr", "u0").await.0.as_u16(), 403);
    let (_, samples) = scrape(&base).await;
    assert_eq!(
        total(&samples, catalog::ROOM_JOINED, &[("campaign", "mxr")]),
        1.0
    );
    assert_eq!(total(&samples, catalog::ROOM_TICKETS_REFUSED, &[]), 1.0);
    let present = names(&samples);
    for fam in catalog::FAMILIES.iter().chain(catalog::PROCESS) {
        if SCALE_OUT_ONLY.contains(&fam.name) || fam.name == catalog::CAMPAIGN_PENDING {
            continue;
        }
        assert!(
            present.contains(fam.name),
            "{} missing from /metrics",
            fam.name
        );
    }
    app.stop().await;
}

/// A flood of claims on made-up campaign ids and of made-up user ids adds no series: the
/// exposition has the same set of series (names and labels) before and after, none of the
/// flooded ids appears in it, and they are all counted under `campaign="other"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_unknown_ids_does_not_grow_the_exposition() {
    let app = App::spawn(Deploy::Embedded).await;
    app.create(json!({"id": "real", "stock": 5, "per_user_limit": 1}))
        .await;
    let base = app.admin_url();
    // Warm-up: one claim of each kind the flood will produce, so their series exist.
    claim_as(&base, "no-such-0", "warm").await;
    for i in 0..6 {
        claim_as(&base, "real", &format!("warm{i}")).await;
    }
    let series = |samples: &[seckill::telemetry::exposition::Sample]| -> HashSet<String> {
        samples
            .iter()
            .filter(|s| !s.name.starts_with("process_"))
            .map(|s| format!("{}{:?}", s.name, s.labels))
            .collect()
    };
    scrape(&base).await; // the scrape's own latency series
    let (_, before) = scrape(&base).await;
    let other_before = total(&before, catalog::CLAIMS, &[("campaign", "other")]);

    const FLOOD: usize = 3000;
    for chunk in (0..FLOOD).collect::<Vec<_>>().chunks(100) {
        join_all(chunk.iter().map(|i| {
            let base = base.clone();
            async move {
                let (s, _) = claim_as(&base, &format!("flood-c{i}"), &format!("flood-u{i}")).await;
                assert_eq!(s.as_u16(), 404);
                let (s, v) = claim_as(&base, "real", &format!("flood-u{i}")).await;
                assert_eq!((s.as_u16(), v["outcome"].as_str()), (200, Some("sold_out")));
            }
        }))
        .await;
    }
    let (text, after) = scrape(&base).await;
    assert_eq!(series(&before), series(&after), "the flood added series");
    assert!(!text.contains("flood-"), "a flooded id became a label");
    assert_eq!(
        total(&after, catalog::CLAIMS, &[("campaign", "other")]) - other_before,
        FLOOD as f64
    );
    assert_eq!(
        total(
            &after,
            catalog::CLAIMS,
            &[("campaign", "real"), ("outcome", "sold_out")]
        ),
        (FLOOD + 1) as f64
    );
    app.stop().await;
}
