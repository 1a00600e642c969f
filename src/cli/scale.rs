//! Starting the scale-out deployment: `seckill serve --redis … --postgres …` and
//! `seckill worker`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ServeConfig, WorkerConfig};
use crate::engine::redis::{RedisConn, RedisTarget, Scripts};
use crate::engine::{ScaleOut, ScaleOutOptions};
use crate::ledger::PgLedger;

/// Opens the scale-out backend described by `cfg.scale` (which must be selected).
pub async fn open(cfg: &ServeConfig) -> anyhow::Result<Arc<ScaleOut>> {
    let s = &cfg.scale;
    let redis = RedisTarget {
        urls: s.redis.clone(),
        cluster: s.redis_cluster,
        sentinel_master: s.redis_sentinel.clone(),
    };
    let sentinel = s.redis_sentinel.is_some();
    let replicas = s.pipeline.wait_replicas(sentinel);
    anyhow::ensure!(
        replicas.is_none() || !redis.is_cluster(),
        "--redis-wait-replicas is not supported with Redis Cluster"
    );
    let mut claim_batch = s.claim_batch.options();
    claim_batch.replicas = replicas;
    let opts = ScaleOutOptions {
        postgres: s.postgres.clone().unwrap_or_default(),
        pg_connections: s.pipeline.pg_connections,
        idempotency_ttl: Duration::from_secs(cfg.idempotency_hours * 3600),
        idempotency_limits: cfg.idem_limits(),
        run_worker: !s.no_worker,
        pipeline: s.pipeline.options(sentinel),
        stock_max_staleness: Duration::from_millis(s.stock_max_staleness_ms.max(1)),
        allow_redis_eviction: s.allow_redis_eviction,
        claim_batch,
        redis: redis.clone(),
    };
    let backend = ScaleOut::open(opts).await?;
    tracing::info!(
        cluster = redis.is_cluster(),
        worker = !s.no_worker,
        wait_replicas = replicas.map_or(0, |w| w.replicas),
        "scale-out deployment ready (Redis gate, PostgreSQL ledger)"
    );
    Ok(backend)
}

/// `seckill worker`: the order pipeline alone, until SIGTERM or Ctrl-C.
pub async fn run_worker(cfg: WorkerConfig) -> anyhow::Result<ExitCode> {
    crate::clock::spawn_step_watch();
    let target = RedisTarget {
        urls: cfg.redis.clone(),
        cluster: cfg.redis_cluster,
        sentinel_master: cfg.redis_sentinel.clone(),
    };
    let ledger = Arc::new(PgLedger::open(&cfg.postgres, cfg.pipeline.pg_connections).await?);
    let scripts = Arc::new(Scripts::default());
    let mut conn = RedisConn::connect(&target).await?;
    crate::engine::redis::RedisSettings::start(&conn, cfg.allow_redis_eviction).await?;
    scripts.load(&mut conn).await?;
    let sup = crate::supervise::Supervisor::new();
    let opts = cfg.pipeline.options(cfg.redis_sentinel.is_some());
    anyhow::ensure!(
        opts.replicas.is_none() || !target.is_cluster(),
        "--redis-wait-replicas is not supported with Redis Cluster"
    );
    crate::pipeline::spawn(&target, ledger, scripts, opts, &sup).await?;
    tracing::info!("seckill worker running");
    super::serve::shutdown_signal().await;
    tracing::info!("shutdown requested");
    sup.shutdown().await;
    tracing::info!("worker stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
