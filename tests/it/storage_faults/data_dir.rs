//! One writer per data directory, and an order id the ledger already holds.
//!
//! Two servers on one directory used to hand out the same order ids and silently drop the
//! second one's wins (`ON CONFLICT DO NOTHING`). Now the second server refuses to start, and an
//! order id that is already in the ledger (written here straight into the SQLite file, as a
//! second writer would) fails its batch, is never acknowledged, and makes the engine re-read
//! the ledger before it sells again.

use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use seckill::bench::client::ClaimReply;
use seckill::domain::Outcome;

use crate::invariants;
use crate::process::Proc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_data_directory_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let first = Proc::start(dir.path());
    let out = tokio::task::spawn_blocking({
        let data = dir.path().to_owned();
        move || {
            Command::new(env!("CARGO_BIN_EXE_seckill"))
                .args([
                    "serve",
                    "--listen",
                    "127.0.0.1:0",
                    "--admin-token",
                    crate::helpers::TOKEN,
                ])
                .arg("--data")
                .arg(&data)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        !out.status.success(),
        "the second server must exit non-zero"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = format!(
        "in use by another seckill process (pid {})",
        first.child.id()
    );
    assert!(stderr.contains(&line), "it names the holder: {stderr}");
    assert!(
        stderr.contains(dir.path().to_str().unwrap()),
        "it names the directory: {stderr}"
    );

    // kill -9 leaves no stale lock: a new server starts at once on the same directory.
    first.signal(libc::SIGKILL);
    drop(first);
    let started = Instant::now();
    let again = Proc::start(dir.path());
    assert!(started.elapsed() < Duration::from_secs(10));
    again.client().campaign("none").await.unwrap_err();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_id_already_in_the_ledger_is_never_acknowledged_and_the_engine_re_reads() {
    let dir = tempfile::tempdir().unwrap();
    let server = Proc::start(dir.path());
    let client = server.client();
    client
        .create_campaign(&json!({"id": "clash", "stock": 100, "per_user_limit": 1}))
        .await
        .unwrap();
    let mut won = Vec::new();
    for i in 1..=5 {
        match client
            .claim("clash", &format!("u{i}"), 1, None)
            .await
            .unwrap()
        {
            ClaimReply::Processed(a) if a.outcome == Outcome::Won => won.push((format!("u{i}"), a)),
            other => panic!("{other:?}"),
        }
    }

    // Another writer puts the next order id into the file behind the engine's back.
    let db = dir.path().join("seckill.db");
    let mut conn = SqliteConnectOptions::from_str(&format!("sqlite://{}", db.display()))
        .unwrap()
        .busy_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO orders (order_id, campaign_id, seq, user_id, qty, codes, state, created_at) \
         VALUES ('clash-6', 'clash', 6, 'intruder', 1, NULL, 'active', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    match client.claim("clash", "u6", 1, None).await.unwrap() {
        ClaimReply::Refused(status, body) => {
            assert_eq!(status.as_u16(), 503, "{body}");
            let msg = body["error"]["message"].as_str().unwrap_or_default();
            assert!(msg.contains("nothing was changed"), "{body}");
        }
        other => panic!("a conflicting order must not be acknowledged: {other:?}"),
    }
    // The log is read by another thread: give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.log.lock().iter().any(|l| l.contains("contradicts")) {
        assert!(Instant::now() < deadline, "the log names the contradiction");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // After the in-process re-read the engine knows the intruder's order and sells on.
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        match client.claim("clash", "u6", 1, None).await.unwrap() {
            ClaimReply::Processed(a) => break a,
            other => {
                assert!(Instant::now() < deadline, "no recovery: {other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(answer.outcome, Outcome::Won);
    assert_eq!(answer.order_id.as_deref(), Some("clash-7"));
    won.push(("u6".into(), answer));
    let view = client.campaign("clash").await.unwrap();
    let orders = client.all_orders("clash").await.unwrap();
    assert_eq!(view.remaining, 100 - 7, "the intruder's unit is counted");
    invariants::check(&view, &orders, &won, false);
    assert!(orders
        .iter()
        .all(|o| o.user_id != "u6" || o.order_id == "clash-7"));
}
