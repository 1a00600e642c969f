//! The scale-out start-up reconcile runs under a lease: an instance starting while another
//! holds the job's lock waits for it, then records its own (higher) fence in `job_fences`
//! before reconciling; two instances starting together both come up, one after the other.

use std::time::Duration;

use seckill::config::ServeConfig;
use seckill::engine::scale_out::RECONCILE_JOB;

use super::{grant, redis_locks};
use crate::helpers::TOKEN;
use crate::servers::RedisServer;

fn config(redis: &str, postgres: &str, dir: &std::path::Path) -> ServeConfig {
    let mut cfg = ServeConfig::ephemeral(dir.into(), TOKEN);
    cfg.scale.redis = vec![redis.to_owned()];
    cfg.scale.postgres = Some(postgres.to_owned());
    cfg.scale.pipeline.pg_connections = 4;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn start_up_reconcile_waits_for_the_lease_and_records_its_fence() {
    let r = RedisServer::start(&[]);
    let (pg, pool) = super::fenced_db().await;
    let dir = tempfile::tempdir().unwrap();
    let locks = redis_locks(&[r.url()], None).await;
    let other = grant(&locks, RECONCILE_JOB, Duration::from_secs(30)).await;

    // Polled in this task (the start future is not spawnable): it must still be waiting.
    let starting = seckill::app::App::build(config(&r.url(), &pg, dir.path()));
    tokio::pin!(starting);
    tokio::select! {
        _ = &mut starting => panic!("started while another instance held the reconcile"),
        _ = tokio::time::sleep(Duration::from_millis(1500)) => {}
    }
    locks.release(RECONCILE_JOB, &other.token).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(20), starting)
        .await
        .expect("starts once the lease is free")
        .expect("instance starts");
    let mut conn = pool.acquire().await.unwrap();
    let recorded = seckill::lock::fenced::highest(&mut conn, RECONCILE_JOB)
        .await
        .unwrap()
        .expect("the reconcile recorded its fence");
    assert!(recorded > other.fence);

    // Two more instances together: both start, each under its own, higher fence.
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (s1, s2) = tokio::join!(
        seckill::app::App::build(config(&r.url(), &pg, a.path())),
        seckill::app::App::build(config(&r.url(), &pg, b.path())),
    );
    let after = seckill::lock::fenced::highest(&mut conn, RECONCILE_JOB)
        .await
        .unwrap()
        .unwrap();
    assert!(after > recorded);
    for s in [first, s1.unwrap(), s2.unwrap()] {
        s.stop().await.unwrap();
    }
}
