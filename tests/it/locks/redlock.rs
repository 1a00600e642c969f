//! Redlock across three independent masters: one master down → grants still work and fences
//! keep increasing; two down → acquire fails cleanly within its timeout; masters restarted
//! without persistence → fences still increase (write-back to a majority + clock floor).

use std::time::{Duration, Instant};

use seckill::lock::{LockError, Locks};

use super::{grant, held, redlock};
use crate::servers::RedisServer;

async fn churn(locks: &Locks, name: &str, last: u64) -> u64 {
    let mut last = last;
    for _ in 0..30 {
        let l = grant(locks, name, Duration::from_secs(5)).await;
        assert!(l.fence > last, "fence {} after {last}", l.fence);
        last = l.fence;
        locks.release(name, &l.token).await.unwrap();
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_survives_one_master_down_and_refuses_cleanly_with_two() {
    let mut masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start(&[])).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let locks = redlock(&urls);
    let mut last = churn(&locks, "rl", 0).await;

    // A holder on all three; one master dies: the lock is still held (2 of 3 say so).
    let holder = grant(&locks, "rl", Duration::from_secs(30)).await;
    masters[0].kill_9();
    held(&locks, "rl").await;
    locks
        .extend("rl", &holder.token, Duration::from_secs(30))
        .await
        .expect("extend with 2 of 3");
    locks.release("rl", &holder.token).await.unwrap();
    last = churn(&locks, "rl", last.max(holder.fence)).await;

    // Two down: no majority; the acquire fails within its per-master timeout.
    masters[1].kill_9();
    let t = Instant::now();
    let r = locks
        .acquire("rl", "t", Duration::from_secs(2), Duration::ZERO)
        .await;
    assert!(matches!(r, Err(LockError::Unavailable(_))), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

    // Both come back empty (no persistence): fences still go up.
    masters[0].start_again();
    masters[1].start_again();
    churn(&locks, "rl", last).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fence_write_back_reaches_a_majority() {
    let mut masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start(&[])).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let locks = redlock(&urls);
    // Push master 2's counter far ahead (as if it had granted much more), grant on all three:
    // the grant's fence is the highest, and it is written back.
    let key = "seckill:lock:{wb}:fence";
    let ahead = 5_000_000_000_000_000u64;
    crate::servers::redis_raw(masters[2].port, &format!("SET {key} {ahead}")).unwrap();
    let l = grant(&locks, "wb", Duration::from_secs(5)).await;
    assert_eq!(l.fence, ahead + 1);
    locks.release("wb", &l.token).await.unwrap();
    // Without master 2, the next grant still goes above it (masters 0 and 1 took the fence).
    masters[2].kill_9();
    let next = grant(&locks, "wb", Duration::from_secs(5)).await;
    assert!(next.fence > l.fence, "{} after {}", next.fence, l.fence);
}
