//! Fences across store restarts and failovers.
//!
//! - Redis without persistence forgets everything on restart; the fence counter is floored by
//!   the server clock (ms × 1000), so the next fence is still higher than every earlier one.
//! - Redis with AOF (fsync always) keeps holder and counter: the holder still holds after the
//!   restart (no second grant while its lease is valid) and fences continue.
//! - Sentinel failover after the grant reached the replica: the promoted replica still has the
//!   holder (no double grant) and fences continue.
//! - The embedded store keeps holder and fence in SQLite across a server restart.

use std::time::Duration;

use seckill::lock::{Attempt, LockError, Locks};

use super::{grant, held, redis_locks};
use crate::helpers::{App, TOKEN};
use crate::servers::{RedisServer, SentinelSetup};

/// Some grants, to move the counter: the highest fence seen.
async fn churn(locks: &Locks, name: &str) -> u64 {
    let mut last = 0;
    for _ in 0..50 {
        let l = grant(locks, name, Duration::from_secs(5)).await;
        assert!(l.fence > last);
        last = l.fence;
        locks.release(name, &l.token).await.unwrap();
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_keep_increasing_after_a_restart_without_persistence() {
    let mut r = RedisServer::start(&[]);
    let locks = redis_locks(&[r.url()], None).await;
    let before = churn(&locks, "nopersist").await;
    let lost = grant(&locks, "nopersist", Duration::from_secs(30)).await;
    r.kill_and_restart();
    // The holder is gone with the data (documented): the next grant is possible at once, but
    // its fence is higher, so a fenced resource refuses the old holder.
    let after = loop {
        match locks
            .acquire("nopersist", "t", Duration::from_secs(5), Duration::ZERO)
            .await
        {
            Ok(Attempt::Granted(l)) => break l,
            Ok(Attempt::Held { .. }) => panic!("a restart without persistence keeps nothing"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(after.fence > lost.fence && lost.fence > before);
    assert!(matches!(
        locks
            .extend("nopersist", &lost.token, Duration::from_secs(5))
            .await,
        Err(LockError::NotHolder(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_aof_keeps_the_holder_and_the_counter() {
    let mut r = RedisServer::start_aof();
    let locks = redis_locks(&[r.url()], None).await;
    let before = churn(&locks, "aof").await;
    let holder = grant(&locks, "aof", Duration::from_secs(30)).await;
    assert!(holder.fence > before);
    r.kill_and_restart();
    let extended = loop {
        match locks
            .extend("aof", &holder.token, Duration::from_secs(30))
            .await
        {
            Ok(l) => break l,
            Err(LockError::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("the holder survives an AOF restart: {e}"),
        }
    };
    assert_eq!(extended.fence, holder.fence);
    held(&locks, "aof").await;
    locks.release("aof", &holder.token).await.unwrap();
    let next = grant(&locks, "aof", Duration::from_secs(5)).await;
    assert!(next.fence > holder.fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_keeps_a_replicated_grant_and_the_fences() {
    let mut s = SentinelSetup::start();
    let locks = redis_locks(&[s.sentinel_url()], Some(SentinelSetup::MASTER)).await;
    let before = churn(&locks, "failover").await;
    let holder = grant(&locks, "failover", Duration::from_secs(60)).await;
    assert!(holder.fence > before);
    s.wait_replicated();
    s.kill_primary_and_fail_over();
    // Until the promoted replica answers, operations fail cleanly; then the holder still holds.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match locks
            .acquire("failover", "t", Duration::from_secs(5), Duration::ZERO)
            .await
        {
            Ok(Attempt::Held { .. }) => break,
            Ok(Attempt::Granted(l)) => panic!("double grant after failover (fence {})", l.fence),
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("no answer after the failover: {e}"),
        }
    }
    locks
        .extend("failover", &holder.token, Duration::from_secs(5))
        .await
        .expect("the holder extends on the new primary");
    locks.release("failover", &holder.token).await.unwrap();
    let next = grant(&locks, "failover", Duration::from_secs(5)).await;
    assert!(next.fence > holder.fence);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_keeps_holder_and_fence_across_a_restart() {
    let mut app = App::spawn_with(|_| {}).await;
    let locks = |app: &App| {
        Locks::new(std::sync::Arc::new(seckill::lock::http::HttpLocks::new(
            &app.admin_url(),
            TOKEN,
        )))
    };
    let l = locks(&app);
    let before = churn(&l, "emb").await;
    let holder = grant(&l, "emb", Duration::from_secs(60)).await;
    app.restart().await;
    let l = locks(&app);
    held(&l, "emb").await;
    l.extend("emb", &holder.token, Duration::from_secs(60))
        .await
        .expect("the holder still holds after a restart");
    l.release("emb", &holder.token).await.unwrap();
    let next = grant(&l, "emb", Duration::from_secs(5)).await;
    assert!(next.fence > holder.fence && holder.fence > before);
}
