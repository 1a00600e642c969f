//! Locks with fencing tokens (`seckill::lock`, `/v1/locks`, `seckill lock run`) against real
//! stores: the SQLite ledger, redis-server, a Redis Cluster, Sentinel and Redlock masters, and
//! PostgreSQL as the fenced resource.

mod bad_input;
mod disk_full;
mod exclusion;
mod fsync_error;
mod kill9;
mod paused;
mod redlock;
mod restart;
mod run;
mod singleton;

use std::sync::Arc;
use std::time::Duration;

use seckill::lock::{Attempt, Lease, Locks};

/// Redis as a lock store (one node, Sentinel or Cluster).
pub async fn redis_locks(urls: &[String], sentinel: Option<&str>) -> Locks {
    let target = seckill::engine::scale_out::RedisTarget {
        urls: urls.to_vec(),
        cluster: false,
        sentinel_master: sentinel.map(str::to_owned),
    };
    let conn = seckill::engine::scale_out::RedisConn::connect(&target)
        .await
        .expect("connect to Redis");
    Locks::new(Arc::new(seckill::lock::redis::RedisLocks::new(conn)))
}

/// Redlock over `urls`.
pub fn redlock(urls: &[String]) -> Locks {
    Locks::new(Arc::new(
        seckill::lock::redlock::Redlock::new(urls).expect("redlock URLs"),
    ))
}

/// One acquire without waiting; panics unless granted.
pub async fn grant(locks: &Locks, name: &str, ttl: Duration) -> Lease {
    match locks.acquire(name, "test", ttl, Duration::ZERO).await {
        Ok(Attempt::Granted(l)) => l,
        other => panic!("expected a grant of {name}, got {other:?}"),
    }
}

/// One acquire without waiting; panics unless another owner holds the lock.
pub async fn held(locks: &Locks, name: &str) {
    match locks
        .acquire(name, "test", Duration::from_secs(5), Duration::ZERO)
        .await
    {
        Ok(Attempt::Held { .. }) => {}
        other => panic!("expected {name} to be held, got {other:?}"),
    }
}

/// A fresh PostgreSQL database migrated by seckill (it has `job_fences`), and a pool on it.
pub async fn fenced_db() -> (String, sqlx::PgPool) {
    let url = crate::servers::pg().fresh_db().await;
    let ledger = seckill::ledger::PgLedger::open(&url, 4)
        .await
        .expect("PostgreSQL ledger");
    (url, ledger.pool().clone())
}

/// Four owners in turn try to take `job` while the store is failing; the fences granted (each
/// lease left to end, so the next owner is not told "held") and how many were refused.
pub async fn grants_under_fault(locks: &Locks) -> (Vec<u64>, usize) {
    let mut fences = Vec::new();
    let mut refused = 0;
    for owner in ["a", "b", "c", "d"] {
        match locks
            .acquire("job", owner, Duration::from_millis(200), Duration::ZERO)
            .await
        {
            Ok(Attempt::Granted(l)) => {
                fences.push(l.fence);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Ok(Attempt::Held { .. }) => panic!("no lease can be live here"),
            Err(e) => {
                eprintln!("{owner}: {e}");
                refused += 1;
            }
        }
    }
    (fences, refused)
}

/// No fence was granted twice, and `last` is the highest.
pub fn assert_fences_grow_once(fences: &[u64], last: u64) {
    let mut sorted = fences.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        fences.len(),
        "a fence granted twice: {fences:?}"
    );
    assert_eq!(*fences.iter().max().unwrap(), last, "{fences:?}");
}
