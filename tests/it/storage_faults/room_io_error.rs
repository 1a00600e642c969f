//! A waiting room's joins meeting disk I/O errors at their commit (`SECKILL_FAULTS`
//! `io_error_while`: odd batches committed, even ones rolled back, both reported as the same
//! error). A batch the disk kept but memory never applied used to wedge the room: every later
//! batch was numbered on top of rows memory did not know and refused by the ledger, so no join
//! was ever placed again until a restart, and the restart's replay then held users the room
//! had answered "nothing was changed". Now such a batch is answered "outcome unknown, join
//! again" and settled by writing the same rows again until a commit succeeds, before anyone
//! can draw the pre-queue: joins keep being placed, and a restart after kill -9 tells every
//! user the admission it was told before.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{queue_join, queue_read};
use crate::process::Proc;

const USERS: usize = 400;

/// Joins `user` until a join answers 200 (a 503 says "nothing was changed" or "read again"),
/// for at most 30 s.
async fn placed(c: &seckill::bench::client::Client, campaign: &str, user: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = queue_join(c, campaign, user).await;
        if status == 200 {
            return body;
        }
        assert_eq!(status, 503, "join of {user}: {body}");
        assert!(Instant::now() < deadline, "{user} never placed: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `seckill serve`'s arguments on the data directory `data`.
fn serve_args(data: &std::path::Path) -> [&str; 6] {
    [
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        crate::helpers::TOKEN,
        "--data",
        data.to_str().unwrap(),
    ]
}

/// A server with `args` whose room commits fail while `flag` exists (`io_error_while`).
fn spawn_io_error(args: &[&str], flag: &std::path::Path) -> Proc {
    let fault = format!("io_error_while={}", flag.display());
    Proc::spawn(args, &[("SECKILL_FAULTS", fault.as_str())])
}

/// Users a0..a29 join `pre` while the disk is healthy; each is answered 200.
async fn join_early(client: &seckill::bench::client::Client) -> Vec<String> {
    let early: Vec<String> = (0..30).map(|u| format!("a{u}")).collect();
    for u in &early {
        let (status, body) = queue_join(client, "pre", u).await;
        assert_eq!(status, 200, "{u}: {body}");
    }
    early
}

/// Campaign `pre`: a shuffled room starting in 3 s, admitting 5 a second (a slot every
/// 200 ms); its `starts_at`.
async fn create_pre(client: &seckill::bench::client::Client) -> chrono::DateTime<chrono::Utc> {
    let starts = chrono::Utc::now() + chrono::TimeDelta::seconds(3);
    client
        .create_campaign(&json!({
            "id": "pre", "stock": 1_000, "per_user_limit": 1, "starts_at": starts,
            "waiting_room": {"admit_per_second": 5, "ticket_seconds": 3600, "shuffle": true},
        }))
        .await
        .unwrap();
    starts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joins_through_io_errors_at_commit_keep_being_placed_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flag = dir.path().join("io-error");
    let args = serve_args(&data);
    let server = spawn_io_error(&args, &flag);
    let client = server.client();
    client
        .create_campaign(&json!({
            "id": "io", "stock": 1_000_000, "per_user_limit": 1,
            "waiting_room": {"admit_per_second": 100_000, "ticket_seconds": 3600, "shuffle": false},
        }))
        .await
        .unwrap();
    for u in 0..20 {
        placed(&client, "io", &format!("before{u}")).await;
    }
    // Joins from 16 tasks while every batch fails at its commit for a second, then after.
    std::fs::write(&flag, b"on").unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..16 {
        let c = client.clone();
        tasks.spawn(async move {
            for u in (t..USERS).step_by(16) {
                placed(&c, "io", &format!("u{u}")).await;
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::remove_file(&flag).unwrap();
    while let Some(done) = tasks.join_next().await {
        done.expect("every user placed once the errors stop");
    }
    assert!(
        server.log.lock().iter().any(|l| l.contains("settled")),
        "the injected I/O errors reached the room's writes"
    );
    // Everyone is admitted by now (100,000 a second): what each is told, then after kill -9.
    let users: Vec<String> = (0..20)
        .map(|u| format!("before{u}"))
        .chain((0..USERS).map(|u| format!("u{u}")))
        .collect();
    let mut told = HashMap::new();
    for u in &users {
        let (status, body) = queue_read(&client, "io", u).await;
        assert_eq!(status, 200, "{u}: {body}");
        assert_eq!(body["state"], "admitted", "{u}: {body}");
        told.insert(u.clone(), body);
    }
    drop(server);
    let server = Proc::spawn(&args, &[]);
    let client = server.client();
    for u in &users {
        let (status, body) = queue_read(&client, "io", u).await;
        assert_eq!(status, 200, "{u} after the restart: {body}");
        assert_eq!(body, told[u], "{u}'s admission changed across the restart");
    }
    // The room goes on after the restart.
    let body = placed(&client, "io", "after").await;
    assert_eq!(body["state"], "admitted", "{body}");
}

/// When `body` (a status answer read at `read_ms`, Unix ms) says its user is admitted.
fn admitted_ms(body: &Value, read_ms: i64) -> i64 {
    match body["state"].as_str() {
        Some("admitted") => {
            chrono::DateTime::parse_from_rfc3339(body["admitted_at"].as_str().unwrap())
                .unwrap()
                .timestamp_millis()
        }
        Some("waiting") => read_ms + body["estimated_wait_ms"].as_i64().unwrap(),
        other => panic!("unexpected state {other:?}: {body}"),
    }
}

/// The same faults just before `starts_at` in a shuffled room admitting 5 a second (a slot
/// every 200 ms): joins whose commit failed are settled before the pre-queue is drawn, so the
/// line the room tells is the line a restart after kill -9 tells, to the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pre_queue_drawn_after_io_errors_is_the_line_a_restart_draws() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flag = dir.path().join("io-error");
    let args = serve_args(&data);
    let server = spawn_io_error(&args, &flag);
    let client = server.client();
    let starts = create_pre(&client).await;
    let early = join_early(&client).await;
    let late: Vec<String> = (0..10).map(|u| format!("b{u}")).collect();
    // The disk fails from 1.5 s before the start to 0.5 s after it, while b0..b9 join.
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(1200)).await;
    std::fs::write(&flag, b"on").unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for u in late.clone() {
        let c = client.clone();
        tasks.spawn(async move {
            placed(&c, "pre", &u).await;
        });
    }
    let until_start = (starts - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(until_start + Duration::from_millis(500)).await;
    std::fs::remove_file(&flag).unwrap();
    while let Some(done) = tasks.join_next().await {
        done.expect("every user placed once the errors stop");
    }
    let log = server.log.lock().join("\n");
    assert!(
        log.contains("settled"),
        "the injected I/O errors reached the room's writes"
    );
    // Once all 40 are admitted (8 s at 5 a second), every admission is an exact time.
    let users: Vec<String> = early.iter().chain(&late).cloned().collect();
    let told = all_admitted(&client, &users).await;
    drop(server);
    let server = Proc::spawn(&args, &[]);
    let again = all_admitted(&server.client(), &users).await;
    for u in &users {
        assert_eq!(
            told[u], again[u],
            "{u}'s admission changed across kill -9 and a restart"
        );
    }
}

/// Every user's answer once all of them are admitted (read again for up to 30 s).
async fn all_admitted(
    c: &seckill::bench::client::Client,
    users: &[String],
) -> HashMap<String, Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = HashMap::new();
    for u in users {
        loop {
            let (status, body) = queue_read(c, "pre", u).await;
            assert_eq!(status, 200, "{u}: {body}");
            if body["state"] == "admitted" {
                out.insert(u.clone(), body);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{u} not admitted in time: {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    out
}

/// The shim of `fsync_eio.c`, compiled into `dir`.
fn fsync_shim(dir: &std::path::Path) -> std::path::PathBuf {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/storage_faults/fsync_eio.c"
    );
    let out = dir.join("fsync_eio.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(src)
        .arg("-ldl")
        .status()
        .expect("a C compiler (cc) builds the fsync shim: apt-get install gcc");
    assert!(built.success(), "the fsync shim did not build");
    out
}

/// The real fault: SQLite's fsync of its write-ahead log fails (EIO) from 1.5 s before the
/// start while later users join, readers come after the start, and the server is killed -9
/// while the disk still fails. SQLite leaves such a commit's frames in the log, invisible to
/// readers, and the restart's recovery replays them; so the room must not draw its pre-queue
/// before those joins are settled. Every place told before the kill must be the place the
/// restart tells. (Before, the readers drew the pre-queue without the failed joins and the
/// restart put them in it: told admissions moved by seconds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn places_told_while_fsync_fails_are_the_places_a_restart_tells() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flag = dir.path().join("fsync-eio");
    let shim = fsync_shim(dir.path());
    let args = serve_args(&data);
    let env = [
        ("LD_PRELOAD", shim.to_str().unwrap()),
        ("SECKILL_TEST_FSYNC_EIO_WHILE", flag.to_str().unwrap()),
    ];
    let server = Proc::spawn(&args, &env);
    let client = server.client();
    let starts = create_pre(&client).await;
    let early = join_early(&client).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    std::fs::write(&flag, b"on").unwrap();
    let mut joins = tokio::task::JoinSet::new();
    for u in 0..10 {
        let c = client.clone();
        joins.spawn(async move {
            let url = c.url("/v1/campaigns/pre/queue");
            let join = c
                .http()
                .post(url)
                .json(&json!({"user_id": format!("b{u}")}));
            // Answered 503 or not at all while the disk fails: either is allowed.
            let _ = join.timeout(Duration::from_secs(2)).send().await;
        });
    }
    let until_start = (starts - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(until_start + Duration::from_millis(500)).await;
    let mut told = HashMap::new();
    for u in &early {
        let read_ms = chrono::Utc::now().timestamp_millis();
        let (status, body) = queue_read(&client, "pre", u).await;
        if status == 200 && body["state"] != "prequeue" {
            told.insert(u.clone(), (admitted_ms(&body, read_ms), body));
        } else {
            assert!(status == 200 || status == 503, "{u}: {status} {body}");
        }
    }
    assert!(
        server
            .log
            .lock()
            .iter()
            .any(|l| l.contains("not settled yet")),
        "the failing fsync reached the room's writes"
    );
    // A later joiner may be in the batch being settled: its place is "read again", never
    // "has not joined".
    for u in 0..10 {
        let (status, body) = queue_read(&client, "pre", &format!("b{u}")).await;
        assert_eq!(status, 503, "b{u} read while its join is unsettled: {body}");
    }
    drop(server);
    let server = Proc::spawn(&args, &[]);
    let client = server.client();
    for u in &early {
        let read_ms = chrono::Utc::now().timestamp_millis();
        let (status, body) = queue_read(&client, "pre", u).await;
        assert_eq!(status, 200, "{u} after the restart: {body}");
        if let Some((at, before)) = told.get(u) {
            let now = admitted_ms(&body, read_ms);
            assert!(
                (at - now).abs() <= 150,
                "{u} was told {before} (admission at {at} ms); after kill -9 and a restart \
                 {body} (at {now} ms)"
            );
        }
    }
    eprintln!(
        "{} of {} places told while fsync failed, all kept",
        told.len(),
        early.len()
    );
}
