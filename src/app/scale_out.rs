//! The scale-out deployment's parts: the Redis gate and PostgreSQL ledger of `ScaleOut`, and
//! the order pipeline between them, in `seckill serve` (unless `--no-worker`) or alone in
//! `seckill worker`. Both read the Redis target and the replica wait the same way here.

use std::sync::Arc;
use std::time::Duration;

use super::Parts;
use crate::config::{PipelineArgs, ServeConfig, WorkerConfig};
use crate::engine::scale_out::{RedisConn, RedisSettings, RedisTarget, Scripts, LIMITS_REFRESH};
use crate::engine::{ScaleOut, ScaleOutOptions};
use crate::feed::Feed;
use crate::ledger::PgLedger;
use crate::pipeline::{self, PipelineOptions};
use crate::supervise::Supervisor;

/// The Redis deployment `urls` name, and the pipeline's options for it.
fn target_and_pipeline(
    urls: &[String],
    cluster: bool,
    sentinel_master: &Option<String>,
    pipeline: &PipelineArgs,
) -> anyhow::Result<(RedisTarget, PipelineOptions)> {
    let target = RedisTarget {
        urls: urls.to_vec(),
        cluster,
        sentinel_master: sentinel_master.clone(),
    };
    let opts = pipeline.options(sentinel_master.is_some());
    anyhow::ensure!(
        opts.replicas.is_none() || !target.is_cluster(),
        "--redis-wait-replicas is not supported with Redis Cluster"
    );
    Ok((target, opts))
}

/// Opens the engine `cfg.scale` describes (which must be selected) and, unless
/// `--no-worker`, the order pipeline beside it, all under `supervisor`.
pub async fn assemble(cfg: &ServeConfig, supervisor: &Arc<Supervisor>) -> anyhow::Result<Parts> {
    let admin_token = cfg
        .admin_token
        .as_ref()
        .map(|t| t.expose().to_owned())
        .filter(|t| !t.trim().is_empty());
    anyhow::ensure!(
        admin_token.is_some() || super::tokens::configured(cfg)?,
        "the scale-out deployment needs --admin-token or --token (the same on every instance)"
    );
    let s = &cfg.scale;
    let (redis, pipeline) =
        target_and_pipeline(&s.redis, s.redis_cluster, &s.redis_sentinel, &s.pipeline)?;
    let mut claim_batch = s.claim_batch.options();
    claim_batch.replicas = pipeline.replicas;
    let run_worker = !s.no_worker;
    let opts = ScaleOutOptions {
        postgres: s.postgres.clone().unwrap_or_default(),
        pg_connections: s.pipeline.pg_connections,
        idempotency_ttl: Duration::from_secs(cfg.idempotency_hours * 3600),
        idempotency_limits: cfg.idem_limits(),
        claims_depend_on: if run_worker {
            vec![pipeline::TASK]
        } else {
            Vec::new()
        },
        stock_max_staleness: Duration::from_millis(s.stock_max_staleness_ms.max(1)),
        allow_redis_eviction: s.allow_redis_eviction,
        claim_batch,
        redis: redis.clone(),
    };
    let replicas = pipeline.replicas.map_or(0, |w| w.replicas);
    let engine = ScaleOut::open(opts, supervisor).await?;
    if run_worker {
        let (ledger, scripts) = (engine.ledger().clone(), engine.scripts().clone());
        pipeline::spawn(&redis, ledger, scripts, pipeline, supervisor).await?;
    }
    tracing::info!(
        cluster = redis.is_cluster(),
        worker = run_worker,
        wait_replicas = replicas,
        "scale-out deployment ready (Redis gate, PostgreSQL ledger)"
    );
    let feed = Feed::new(engine.ledger().clone(), cfg.events_retention);
    feed.spawn_upkeep(supervisor);
    let key = engine.ledger().room_key().await?;
    let store = Arc::new(crate::room::redis::RedisRooms::new(
        engine.redis(),
        engine.clone(),
        engine.wait_replicas(),
    ));
    let rooms = Arc::new(crate::room::Rooms::new(store, engine.clone(), key));
    Ok(Parts {
        rooms,
        feed,
        board: engine.board(),
        limiter: Some(engine.rate_limiter()),
        limits_refresh: Some(LIMITS_REFRESH),
        locks: engine.locks(),
        backend: engine,
        admin_token,
    })
}

/// `seckill worker`: the order pipeline alone, running in the background.
pub struct Worker {
    supervisor: Arc<Supervisor>,
}

impl Worker {
    /// Opens the ledger, checks Redis's settings, loads the scripts and starts the pipeline.
    pub async fn build(cfg: &WorkerConfig) -> anyhow::Result<Worker> {
        crate::clock::spawn_step_watch();
        crate::redis_conn::tls::configure(&cfg.redis_tls)?;
        let (target, opts) = target_and_pipeline(
            &cfg.redis,
            cfg.redis_cluster,
            &cfg.redis_sentinel,
            &cfg.pipeline,
        )?;
        let ledger = Arc::new(PgLedger::open(&cfg.postgres, cfg.pipeline.pg_connections).await?);
        let scripts = Arc::new(Scripts::default());
        let mut conn = RedisConn::connect(&target).await?;
        RedisSettings::start(&conn, cfg.allow_redis_eviction).await?;
        scripts.load(&mut conn).await?;
        let supervisor = Supervisor::new();
        pipeline::spawn(&target, ledger, scripts, opts, &supervisor).await?;
        tracing::info!("seckill worker running");
        Ok(Worker { supervisor })
    }

    /// Lets the pipeline finish its current step, then stops it.
    pub async fn stop(self) {
        self.supervisor.shutdown().await;
    }
}
