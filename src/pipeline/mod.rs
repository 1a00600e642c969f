//! The order pipeline of the scale-out deployment: Redis Streams → PostgreSQL.
//!
//! Every won claim leaves its order in its campaign's stream (the claim script appends it
//! atomically with the reservation). Consumers in the consumer group `seckill` — one inside
//! each `seckill serve` by default, or separate `seckill worker` processes — move them into
//! the ledger ([`Consumer`]). The lag (orders answered `won` but not yet in the ledger) is
//! the total length of the streams, because entries are deleted as they are acknowledged;
//! `GET /healthz` reports it as `pipeline_lag`.

mod consumer;
pub(crate) mod entry;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use consumer::{Consumer, Step, LEDGER_RULE, LOST, RECLAIM_JOB, REISSUED};
pub use entry::Entry;

use crate::engine::scale_out::{Health, RedisConn, RedisTarget, Scripts};
use crate::ledger::PgLedger;
use crate::supervise::Supervisor;

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    /// Most orders inserted in one transaction.
    pub batch: usize,
    /// Entries a consumer has held unacknowledged this long are taken over (it crashed).
    pub reclaim_after: Duration,
    /// This consumer's name in the group; unique per running process.
    pub consumer: String,
    /// Move orders into the ledger only once this many replicas have them
    /// (`--redis-wait-replicas`).
    pub replicas: Option<crate::engine::scale_out::WaitReplicas>,
}

impl PipelineOptions {
    /// Defaults with a fresh consumer name (process id + random suffix).
    pub fn new() -> Self {
        Self {
            batch: 1000,
            reclaim_after: Duration::from_secs(30),
            consumer: default_consumer_name(),
            replicas: None,
        }
    }
}

impl Default for PipelineOptions {
    fn default() -> Self {
        Self::new()
    }
}

pub fn default_consumer_name() -> String {
    format!(
        "seckill-{}-{}",
        std::process::id(),
        hex::encode(rand::random::<[u8; 3]>())
    )
}

/// The supervised task name of the in-process consumer.
pub const TASK: &str = "pipeline";

/// Starts a consumer on a dedicated Redis connection, supervised by `sup` (restarted if it
/// panics or exits; a new consumer first re-reads the entries it held, under the same name).
/// It stops, after finishing its current step, on the supervisor's shutdown.
pub async fn spawn(
    target: &RedisTarget,
    ledger: Arc<PgLedger>,
    scripts: Arc<Scripts>,
    opts: PipelineOptions,
    sup: &Arc<Supervisor>,
) -> anyhow::Result<()> {
    let conn = RedisConn::connect(target).await?;
    tracing::info!(consumer = %opts.consumer, "order pipeline started");
    sup.spawn_graceful(TASK, move |stopped| {
        let consumer = Consumer::new(conn.clone(), ledger.clone(), scripts.clone(), opts.clone());
        run(consumer, stopped)
    });
    Ok(())
}

/// Resolves once the watched connection is up on another connection than the one of
/// generation `before` (it went down and came back since, maybe during the step that just
/// failed); never for a cluster.
async fn redis_back(watch: &mut Option<watch::Receiver<Health>>, before: Option<u64>) {
    let Some(w) = watch else {
        return std::future::pending().await;
    };
    loop {
        let now = *w.borrow_and_update();
        if now.up && Some(now.generation) != before {
            return;
        }
        if w.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Longest one consumer step may take before it is abandoned and retried.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

async fn run(mut consumer: Consumer, mut stopped: watch::Receiver<bool>) -> anyhow::Result<()> {
    const IDLE_MIN: Duration = Duration::from_millis(2);
    const IDLE_MAX: Duration = Duration::from_millis(50);
    const BACKOFF_MIN: Duration = Duration::from_millis(100);
    const BACKOFF_MAX: Duration = Duration::from_secs(2);
    let (mut idle, mut backoff) = (IDLE_MIN, BACKOFF_MIN);
    let mut redis = consumer.redis_watch();
    while !*stopped.borrow() {
        let generation = redis.as_ref().map(|w| w.borrow().generation);
        // Bounded: a connection still reconnecting to an unreachable Redis can hang a request;
        // nothing is lost by abandoning a step (unacknowledged entries are read again).
        let step = match tokio::time::timeout(STEP_TIMEOUT, consumer.step()).await {
            Ok(step) => step,
            Err(_) => {
                consumer.recheck_own();
                Err(anyhow::anyhow!(
                    "the step took longer than {STEP_TIMEOUT:?}"
                ))
            }
        };
        let pause = match step {
            Ok(step) if step.read > 0 => {
                tracing::debug!(?step, "pipeline step");
                (idle, backoff) = (IDLE_MIN, BACKOFF_MIN);
                continue;
            }
            Ok(_) => {
                let p = idle;
                idle = (idle * 2).min(IDLE_MAX);
                p
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), retry_in_ms = backoff.as_millis() as u64, "pipeline step failed");
                let p = backoff;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                p
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stopped.changed() => {}
            // Redis answering again ends a backoff at once: orders move within the reconnect.
            _ = redis_back(&mut redis, generation) => (idle, backoff) = (IDLE_MIN, BACKOFF_MIN),
        }
    }
    consumer.release_lease().await;
    tracing::info!(consumer = consumer.name(), "order pipeline stopped");
    Ok(())
}
