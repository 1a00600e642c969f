//! A Redis Cluster master (AOF `always`) killed -9 under load and started again 3 s later on
//! the same data: the instance wins claims again on the campaign that master holds within
//! 1 s of it serving again (its cluster state ok: a restarted master answers CLUSTERDOWN for
//! Redis's own 2 s rejoin delay, which those claims are refused with, "nothing was changed"),
//! claims meanwhile are refused without piling up, and every `won` is in PostgreSQL exactly
//! once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::procs::Seckill;
use super::redis_outage::{check_orders, load, recovery, refusals_between, Log};
use crate::servers::{pg, redis_raw, wait_until, RedisCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_master_killed_under_load_recovers() {
    let mut cluster = RedisCluster::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let db = pg().fresh_db().await;
    let serve = Seckill::serve(&cluster.urls(), &db, &[]);
    let client = serve.client();
    client
        .create_campaign(&json!({"id": "shard", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();
    let owner = cluster
        .nodes
        .iter()
        .position(|n| {
            redis_raw(n.port, "EXISTS {c:shard}:meta").is_some_and(|r| r.starts_with(":1"))
        })
        .expect("one master holds the campaign");
    let stop = Arc::new(AtomicBool::new(false));
    let log: Log = Arc::default();
    let tasks = load(
        std::slice::from_ref(&client),
        "shard",
        8,
        stop.clone(),
        log.clone(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    let killed = Instant::now();
    tokio::task::block_in_place(|| cluster.nodes[owner].kill_9());
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| cluster.nodes[owner].start_again());
    let pinged = Instant::now();
    // A restarted master answers PING at once but CLUSTERDOWN for Redis's own rejoin delay
    // (CLUSTER_WRITABLE_DELAY, 2 s): it serves once its cluster state is ok.
    let port = cluster.nodes[owner].port;
    tokio::task::block_in_place(|| {
        wait_until("the restarted master's cluster state", || {
            redis_raw(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
        })
    });
    let up = Instant::now();
    let took = recovery(&log, 1, up, &[&serve]).await;
    let (refused, slowest) = refusals_between(&log, killed, up);
    eprintln!(
        "cluster master down 3 s: cluster state ok {:?} after PING answered, won again \
         {took:?} after that; {refused} claims refused during the outage, the slowest refusal \
         took {slowest:?}",
        up - pinged
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        took[0] <= Duration::from_secs(1),
        "won again only {:?} after the master served again",
        took[0]
    );
    check_orders(&client, "shard", &log).await;
}
