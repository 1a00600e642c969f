//! Mutual exclusion under contention, on every store: many clients on one name, each holding
//! for a short random time and doing a read-modify-write with an await in the middle (lost
//! updates without exclusion), recording (fence, enter, leave). Sorted by entry, no holder may
//! enter before the previous one left, and fences must strictly increase.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seckill::lock::{Attempt, Locks};

use super::{redis_locks, redlock};
use crate::helpers::{App, TOKEN};
use crate::servers::{RedisCluster, RedisServer};

const CLIENTS: usize = 24;
const GRANTS_EACH: usize = 8;

async fn contend(locks: Locks) {
    let name = "contended";
    let log = Arc::new(Mutex::new(Vec::<(u64, Instant, Instant)>::new()));
    let counter = Arc::new(Mutex::new(0u64));
    let attempts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (locks, log, counter, attempts) = (
            locks.clone(),
            log.clone(),
            counter.clone(),
            attempts.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut got = 0;
            while got < GRANTS_EACH {
                attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let ttl = Duration::from_secs(10);
                let owner = format!("client-{c}");
                let lease = match locks.acquire(name, &owner, ttl, Duration::ZERO).await {
                    Ok(Attempt::Granted(l)) => l,
                    Ok(Attempt::Held { .. }) => {
                        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 5)).await;
                        continue;
                    }
                    Err(e) => panic!("acquire failed: {e}"),
                };
                let enter = Instant::now();
                let before = *counter.lock();
                tokio::time::sleep(Duration::from_micros(rand::random::<u64>() % 3000)).await;
                *counter.lock() = before + 1;
                let leave = Instant::now();
                log.lock().push((lease.fence, enter, leave));
                locks.release(name, &lease.token).await.expect("release");
                got += 1;
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let mut log = log.lock().clone();
    assert_eq!(log.len(), CLIENTS * GRANTS_EACH);
    assert_eq!(
        *counter.lock(),
        (CLIENTS * GRANTS_EACH) as u64,
        "lost updates"
    );
    log.sort_by_key(|(_, enter, _)| *enter);
    for w in log.windows(2) {
        let ((f1, _, leave1), (f2, enter2, _)) = (w[0], w[1]);
        assert!(
            f2 > f1,
            "fences must increase in grant order: {f1} then {f2}"
        );
        assert!(
            leave1 <= enter2,
            "two holders overlapped (fences {f1}, {f2})"
        );
    }
    eprintln!(
        "{}: {} grants, {} acquire attempts by {CLIENTS} clients",
        locks.kind(),
        log.len(),
        attempts.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = seckill::ledger::SqliteLedger::open(dir.path(), false)
        .await
        .unwrap();
    let store = seckill::lock::embedded::EmbeddedLocks::new(Arc::new(ledger));
    contend(Locks::new(Arc::new(store))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_over_http() {
    let app = App::spawn_with(|c| c.sync = seckill::config::SyncMode::Normal).await;
    let http = seckill::lock::http::HttpLocks::new(&app.admin_url(), TOKEN);
    contend(Locks::new(Arc::new(http))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_single() {
    let r = RedisServer::start(&[]);
    contend(redis_locks(&[r.url()], None).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster() {
    let c = RedisCluster::start();
    contend(redis_locks(&c.urls(), None).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_three_masters() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start(&[])).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    contend(redlock(&urls)).await;
}
