//! A ledger commit that fails undoes its reservations and answers 503; nothing is oversold or
//! lost. The failure is real: a trigger added to the live SQLite file aborts order inserts.

use futures::future::join_all;
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

use seckill::bench::client::ClaimReply;
use seckill::bench::fire;
use seckill::domain::Outcome;

use crate::helpers::{App, Deploy};
use crate::invariants;

async fn ledger(app: &App) -> SqliteConnection {
    let path = app.data_dir().join("seckill.db");
    SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("open the ledger file")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_commit_undoes_reservations_and_answers_503() {
    let app = App::spawn(Deploy::Embedded).await;
    app.create(json!({"id": "fragile", "codes": (0..100).map(|i| format!("F{i}")).collect::<Vec<_>>(), "per_user_limit": 1}))
        .await;
    let before = fire::storm(&app.client, "fragile", fire::distinct_users(10), 10).await;
    assert_eq!(before.count("won"), 10);

    let mut db = ledger(&app).await;
    sqlx::query("CREATE TRIGGER injected_failure BEFORE INSERT ON orders BEGIN SELECT RAISE(ABORT, 'disk on fire'); END")
        .execute(&mut db)
        .await
        .unwrap();

    let shots: Vec<_> = (0..300).map(|i| format!("victim-{i}")).collect();
    let replies = join_all(
        shots
            .iter()
            .map(|u| app.client.claim("fragile", u, 1, None)),
    )
    .await;
    // Reservations waiting on a doomed commit really hold the stock, so some victims see
    // `sold_out`; none may see `won`, and every reservation made must fail with 503.
    let mut failed = 0;
    for r in &replies {
        match r.as_ref().unwrap_or_else(|e| panic!("transport: {e:?}")) {
            ClaimReply::Refused(status, body) => {
                assert_eq!(status.as_u16(), 503, "{body}");
                assert_eq!(body["error"]["code"], "internal", "{body}");
                failed += 1;
            }
            ClaimReply::Processed(a) => assert_eq!(
                a.outcome,
                Outcome::SoldOut,
                "answered while the ledger fails: {a:?}"
            ),
        }
    }
    assert!(
        failed >= 90,
        "at least the first 90 reservations failed, saw {failed}"
    );
    let raw = app
        .client
        .http()
        .post(app.client.url("/v1/campaigns/fragile/claims"))
        .json(&json!({"user_id": "raw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 503);
    assert_eq!(raw.headers()["retry-after"], "1");
    let keyed = app
        .client
        .claim("fragile", "keyed", 1, Some("k1"))
        .await
        .unwrap();
    assert!(matches!(keyed, ClaimReply::Refused(s, _) if s.as_u16() == 503));
    let view = app.client.campaign("fragile").await.unwrap();
    assert_eq!(
        view.remaining, 90,
        "every failed reservation was given back"
    );

    sqlx::query("DROP TRIGGER injected_failure")
        .execute(&mut db)
        .await
        .unwrap();
    // The victims' allowances were freed, their codes returned: they can all claim now.
    let after = fire::storm(
        &app.client,
        "fragile",
        shots
            .iter()
            .take(90)
            .map(|u| fire::Shot {
                user: u.clone(),
                qty: 1,
                key: None,
            })
            .collect(),
        50,
    )
    .await;
    assert_eq!(after.count("won"), 90);
    let retry = app.claim_with_key("fragile", "keyed", 1, Some("k1")).await;
    assert_eq!(
        retry.outcome,
        Outcome::SoldOut,
        "a key whose first try failed is processed afresh"
    );

    let won: Vec<_> = before
        .answers
        .iter()
        .chain(after.answers.iter())
        .filter(|(_, a)| a.outcome == Outcome::Won)
        .map(|(s, a)| (s.user.clone(), a.clone()))
        .collect();
    let view = app.client.campaign("fragile").await.unwrap();
    let orders = app.client.all_orders("fragile").await.unwrap();
    assert_eq!(orders.len(), 100);
    invariants::check(&view, &orders, &won, true);
    app.stop().await;
}
