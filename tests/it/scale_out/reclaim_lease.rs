//! The pipeline's reclaiming runs under a lease: with two workers on one stream only the
//! lease holder takes over a stalled consumer's orders; when the holder is SIGSTOPped past its
//! lease right after taking orders over, the other worker takes over reclaiming, and the
//! stopped one, resumed, has its write of those orders refused by the fence in `job_fences`.
//! No order is lost or doubled.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use seckill::bench::fire;
use seckill::engine::scale_out::{Keys, GROUP};
use seckill::pipeline::RECLAIM_JOB;
use serde_json::json;

use super::procs::{stopped, wait_for, Seckill};
use super::{check_exact, won_of};
use crate::helpers::settle_url;
use crate::servers::{pg, RedisServer};

/// `(entry id, owner)` of every entry pending in the group.
async fn pending(
    conn: &mut redis::aio::MultiplexedConnection,
    stream: &str,
) -> Vec<(String, String)> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(stream)
        .arg(GROUP)
        .arg("-")
        .arg("+")
        .arg(100_000)
        .query_async(conn)
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, owner, _, _)| (id, owner))
        .collect()
}

/// The fence a worker logged when it took the reclaim lease (the last one).
fn lease_fence(log: &str) -> Option<u64> {
    log.lines()
        .filter(|l| l.contains("holding the pipeline's reclaim lease"))
        .filter_map(|l| l.split("fence=").nth(1))
        .filter_map(|f| f.split_whitespace().next()?.parse().ok())
        .next_back()
}

async fn highest_fence(pool: &sqlx::PgPool) -> Option<u64> {
    let mut conn = pool.acquire().await.unwrap();
    seckill::lock::fenced::highest(&mut conn, RECLAIM_JOB)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_lease_holder_reclaims_and_a_paused_holder_is_fenced_off() {
    const STOCK: u64 = 3000;
    // Stream entries, each one claim batch's orders (3,000 claims from 64 connections come as
    // at least 3,000 / 64 entries).
    const STRANDED: usize = 20;
    let redis = RedisServer::start_aof();
    let postgres = pg().fresh_db().await;
    let pool = seckill::ledger::PgLedger::open(&postgres, 2)
        .await
        .unwrap()
        .pool()
        .clone();
    let urls = vec![redis.url()];
    let serve = Seckill::serve(&urls, &postgres, &["--no-worker"]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "fenced", "stock": STOCK}))
        .await
        .unwrap();
    let report = fire::storm(&client, "fenced", fire::distinct_users(STOCK as usize), 64).await;
    assert_eq!(report.count("won"), STOCK);

    // A consumer that read orders and died: they stay pending under its name.
    let stream = Keys::new("fenced").orders();
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    super::read_as(&mut conn, &stream, "crashed", STRANDED).await;
    let stranded: HashSet<String> = pending(&mut conn, &stream)
        .await
        .into_iter()
        .map(|(id, owner)| {
            assert_eq!(owner, "crashed");
            id
        })
        .collect();
    assert_eq!(stranded.len(), STRANDED);

    // Worker a takes the lease first; it stops itself right after its first takeover.
    let dir = tempfile::tempdir().unwrap();
    let arm = dir.path().join("stop-after-reclaim");
    std::fs::write(&arm, b"").unwrap();
    let faults = format!("stop_after_reclaim={}", arm.display());
    let takeover = ["--reclaim-after-ms", "3000"];
    let mut a_args = vec!["--consumer", "a"];
    a_args.extend(takeover);
    let mut a = Seckill::worker_env(&urls, &postgres, &a_args, &[("SECKILL_FAULTS", &faults)]);
    wait_for(
        "worker a to hold the reclaim lease",
        Duration::from_secs(30),
        || lease_fence(&a.log_text()).is_some(),
    )
    .await;
    let mut b_args = vec!["--consumer", "b"];
    b_args.extend(takeover);
    let b = Seckill::worker(&urls, &postgres, &b_args);

    // Both drain the new orders; the stranded ones are taken over by a alone, which stops.
    let a_pid = a.pid();
    wait_for(
        "worker a to stop after its takeover",
        Duration::from_secs(60),
        || stopped(a_pid),
    )
    .await;
    let fence_a = lease_fence(&a.log_text()).unwrap();
    let owners: HashMap<String, String> = pending(&mut conn, &stream).await.into_iter().collect();
    for id in &stranded {
        assert_eq!(
            owners.get(id).map(String::as_str),
            Some("a:reclaim"),
            "stranded entry {id} is not held by the lease holder: {owners:?}"
        );
    }
    assert!(
        !b.log_text().contains("took over orders"),
        "b reclaimed while a held the lease: {}",
        b.log_text()
    );

    // a is stopped past its lease: b takes reclaiming over, writes under a higher fence.
    wait_for(
        "worker b to take the lease over",
        Duration::from_secs(60),
        || lease_fence(&b.log_text()).is_some_and(|f| f > fence_a),
    )
    .await;
    settle_url(&client).await;
    assert!(
        b.log_text().contains("took over orders"),
        "b did not reclaim: {}",
        b.log_text()
    );
    let fence_b = highest_fence(&pool).await.expect("b recorded its fence");
    assert!(
        fence_b > fence_a,
        "b wrote with fence {fence_b}, a holds {fence_a}"
    );
    assert!(pending(&mut conn, &stream).await.is_empty());

    // a resumes and sends the write it was about to make: refused, nothing written or acked.
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(a_pid, libc::SIGCONT) };
    wait_for(
        "a's write to be refused by the fence",
        Duration::from_secs(30),
        || a.log_text().contains("refused by the ledger's fence"),
    )
    .await;
    assert_eq!(highest_fence(&pool).await, Some(fence_b));
    tokio::time::sleep(Duration::from_millis(500)).await;
    settle_url(&client).await;
    assert_eq!(
        lease_fence(&a.log_text()),
        Some(fence_a),
        "a took the lease again while b held it"
    );
    let won = won_of(
        &report
            .answers
            .iter()
            .map(|(s, ans)| (s.user.clone(), ans.clone()))
            .collect::<Vec<_>>(),
    );
    check_exact(&client, "fenced", &won, true).await;
    a.sigkill();
    drop(b);
}
