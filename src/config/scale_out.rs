//! Typed settings of the scale-out deployment: the Redis gate and PostgreSQL ledger of
//! `seckill serve --redis … --postgres …`, its claim batches and order pipeline, and
//! `seckill worker`.

use clap::Args;

/// Settings of the scale-out deployment (`--redis` and `--postgres` together select it).
#[derive(Debug, Clone, Default, Args)]
pub struct ScaleOutArgs {
    /// Redis of the scale-out gate: `redis://host:port[/db]`. Several comma-separated URLs are
    /// the seed nodes of a Redis Cluster.
    #[arg(
        long,
        env = "SECKILL_REDIS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis: Vec<String>,

    /// Speak the Redis Cluster protocol even with a single seed URL.
    #[arg(long, env = "SECKILL_REDIS_CLUSTER")]
    pub redis_cluster: bool,

    /// The `--redis` URLs are Redis Sentinels; use the primary they know by this name and
    /// follow it through failovers.
    #[arg(long, env = "SECKILL_REDIS_SENTINEL")]
    pub redis_sentinel: Option<String>,

    /// PostgreSQL ledger of the scale-out deployment: `postgres://user:pass@host:port/db`.
    #[arg(long, env = "SECKILL_POSTGRES", hide_env_values = true)]
    pub postgres: Option<String>,

    /// Start (and keep serving claims) even though Redis's maxmemory-policy may evict keys:
    /// an evicted stream entry is an answered win lost. Without it such a Redis is refused.
    #[arg(long, env = "SECKILL_ALLOW_REDIS_EVICTION")]
    pub allow_redis_eviction: bool,

    /// Do not run the order pipeline in this process (a `seckill worker` runs it).
    #[arg(long, env = "SECKILL_NO_WORKER")]
    pub no_worker: bool,

    /// How often each instance re-reads the campaigns it believes sold out: the longest a
    /// stale `sold_out` outlives a restock or cancel whose pub/sub announcement was lost.
    #[arg(long, env = "SECKILL_STOCK_MAX_STALENESS_MS", default_value_t = 1000)]
    pub stock_max_staleness_ms: u64,

    #[command(flatten)]
    pub pipeline: PipelineArgs,

    #[command(flatten)]
    pub claim_batch: ClaimBatchArgs,

    /// TLS to Redis (`rediss://` URLs): a private CA, a client certificate.
    #[command(flatten)]
    pub redis_tls: crate::redis_conn::tls::RedisTlsArgs,
}

/// How concurrent claims on one campaign are gathered into one Redis call (group commit).
#[derive(Debug, Clone, Args)]
pub struct ClaimBatchArgs {
    /// Most claims of one campaign decided by one Redis script call (1: a call per claim).
    #[arg(long, env = "SECKILL_CLAIM_BATCH", default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub claim_batch: u64,

    /// Longest a claim waits, in microseconds, for its campaign's previous Redis call to
    /// return so that the claims arriving meanwhile share its call (never when the campaign
    /// has no call in flight).
    #[arg(long, env = "SECKILL_CLAIM_BATCH_WAIT_US", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub claim_batch_wait_us: u64,
}

impl Default for ClaimBatchArgs {
    fn default() -> Self {
        Self {
            claim_batch: 128,
            claim_batch_wait_us: 1000,
        }
    }
}

impl ClaimBatchArgs {
    pub fn options(&self) -> crate::engine::scale_out::BatchOptions {
        crate::engine::scale_out::BatchOptions {
            max: self.claim_batch as usize,
            wait: std::time::Duration::from_micros(self.claim_batch_wait_us),
            replicas: None,
        }
    }
}

impl ScaleOutArgs {
    /// Whether scale-out was asked for; an error if only one of `--redis` / `--postgres` is set.
    pub fn selected(&self) -> anyhow::Result<bool> {
        match (self.redis.is_empty(), self.postgres.is_some()) {
            (true, false) => Ok(false),
            (false, true) => Ok(true),
            (false, false) => anyhow::bail!(
                "--redis needs --postgres: the scale-out deployment keeps its ledger in PostgreSQL"
            ),
            (true, true) => {
                anyhow::bail!("--postgres needs --redis: the scale-out deployment's gate is Redis")
            }
        }
    }
}

/// Tuning of the order pipeline (Redis Streams → PostgreSQL).
#[derive(Debug, Clone, Args)]
pub struct PipelineArgs {
    /// Most orders inserted into PostgreSQL in one transaction.
    #[arg(long, env = "SECKILL_PIPELINE_BATCH", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub pipeline_batch: u64,

    /// Milliseconds after which orders held by a consumer that stopped acknowledging (it
    /// crashed) are taken over by another.
    #[arg(long, env = "SECKILL_RECLAIM_AFTER_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub reclaim_after_ms: u64,

    /// Name of this process in the stream consumer group (default: pid + random suffix).
    #[arg(long, env = "SECKILL_CONSUMER")]
    pub consumer: Option<String>,

    /// Connections of this process to PostgreSQL (at least 2: an admin change holds one while
    /// it reads through another).
    #[arg(long, env = "SECKILL_PG_CONNECTIONS", default_value_t = 16, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub pg_connections: u32,

    /// Answer claims and move orders into the ledger only once this many Redis replicas have
    /// them (Redis WAIT); 0: never wait. Default: 1 with --redis-sentinel, else 0.
    #[arg(long, env = "SECKILL_REDIS_WAIT_REPLICAS", value_parser = clap::value_parser!(u32).range(0..=16))]
    pub redis_wait_replicas: Option<u32>,

    /// Longest a claim batch waits for the replicas before answering 503 (outcome unknown).
    /// At most 1000: Redis holds every later command of the connection behind a `WAIT`,
    /// the link's heartbeat included, and a heartbeat unanswered for 1.5 s declares the
    /// connection dead (every claim refused until it reconnects).
    #[arg(long, env = "SECKILL_REDIS_WAIT_TIMEOUT_MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub redis_wait_timeout_ms: u64,
}

impl Default for PipelineArgs {
    fn default() -> Self {
        Self {
            pipeline_batch: 1000,
            reclaim_after_ms: 30_000,
            consumer: None,
            pg_connections: 16,
            redis_wait_replicas: None,
            redis_wait_timeout_ms: 500,
        }
    }
}

impl PipelineArgs {
    /// `--redis-wait-replicas`, defaulting to 1 behind Sentinel (`sentinel`), else off.
    pub fn wait_replicas(&self, sentinel: bool) -> Option<crate::engine::scale_out::WaitReplicas> {
        let n = self.redis_wait_replicas.unwrap_or(u32::from(sentinel));
        crate::engine::scale_out::WaitReplicas::new(n, self.redis_wait_timeout_ms)
    }

    /// The pipeline's options; `sentinel` as in [`Self::wait_replicas`].
    pub fn options(&self, sentinel: bool) -> crate::pipeline::PipelineOptions {
        let mut o = crate::pipeline::PipelineOptions::new();
        o.replicas = self.wait_replicas(sentinel);
        o.batch = self.pipeline_batch as usize;
        o.reclaim_after = std::time::Duration::from_millis(self.reclaim_after_ms);
        if let Some(name) = &self.consumer {
            o.consumer = name.clone();
        }
        o
    }
}

/// `seckill worker`: only the order pipeline, against the same Redis and PostgreSQL.
#[derive(Debug, Clone, Args)]
pub struct WorkerConfig {
    /// Settings file (TOML; the keys are the flags' names), shared with `serve`: keys only
    /// `serve` has are left to it. Flags and SECKILL_* variables override it.
    #[arg(long, env = "SECKILL_CONFIG")]
    pub config: Option<std::path::PathBuf>,

    /// Redis of the gate (comma-separated URLs: a Redis Cluster).
    #[arg(
        long,
        env = "SECKILL_REDIS",
        value_delimiter = ',',
        required = true,
        hide_env_values = true
    )]
    pub redis: Vec<String>,

    /// Speak the Redis Cluster protocol even with a single seed URL.
    #[arg(long, env = "SECKILL_REDIS_CLUSTER")]
    pub redis_cluster: bool,

    /// The `--redis` URLs are Redis Sentinels; use the primary they know by this name and
    /// follow it through failovers.
    #[arg(long, env = "SECKILL_REDIS_SENTINEL")]
    pub redis_sentinel: Option<String>,

    /// PostgreSQL ledger.
    #[arg(long, env = "SECKILL_POSTGRES", hide_env_values = true)]
    pub postgres: String,

    /// Start (and keep serving claims) even though Redis's maxmemory-policy may evict keys:
    /// an evicted stream entry is an answered win lost. Without it such a Redis is refused.
    #[arg(long, env = "SECKILL_ALLOW_REDIS_EVICTION")]
    pub allow_redis_eviction: bool,

    #[command(flatten)]
    pub pipeline: PipelineArgs,

    /// TLS to Redis (`rediss://` URLs): a private CA, a client certificate.
    #[command(flatten)]
    pub redis_tls: crate::redis_conn::tls::RedisTlsArgs,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "SECKILL_LOG_JSON")]
    pub log_json: bool,
}
