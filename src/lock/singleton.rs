//! Jobs that must run once among several seckill instances (the scale-out start-up
//! reconcile), run under a lease whose fence is recorded in PostgreSQL first.
//!
//! [`run_once`] acquires the job's lock (waiting while another instance runs it), writes the
//! fence into `job_fences` — refused if a later holder already recorded a higher one, in which
//! case it acquires again — runs the work while a [`LeaseGuard`](super::LeaseGuard) keeps the
//! lease, and stops the work the moment the lease is lost. Two instances starting together
//! therefore reconcile one after the other, never at once, and the ledger keeps the fence of
//! the last run.

use std::future::Future;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

use super::{fenced, Locks};

/// Longest an instance waits for another one's run of the job.
const WAIT: Duration = Duration::from_secs(300);

/// Runs `work(fence)` holding the lock `job` on `locks` for `ttl` (extended in the
/// background), after recording the fence for `job` in PostgreSQL.
pub async fn run_once<T, F, Fut>(
    locks: &Locks,
    pool: &PgPool,
    job: &str,
    owner: &str,
    ttl: Duration,
    work: F,
) -> anyhow::Result<T>
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    let guard = loop {
        let wait = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .min(Duration::from_millis(super::MAX_WAIT_MS));
        let guard = locks
            .hold(job, owner, ttl, wait)
            .await
            .with_context(|| format!("acquiring the lock of job {job}"))?;
        let Some(guard) = guard else {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "job {job} is still held by another instance after {WAIT:?}"
            );
            continue;
        };
        let mut conn = pool.acquire().await.context("PostgreSQL for job fences")?;
        if fenced::check_and_set(&mut conn, job, guard.fence()).await? {
            break guard;
        }
        tracing::warn!(
            job,
            fence = guard.fence(),
            "a later holder already ran this job; acquiring again"
        );
        let _ = guard.release().await;
    };
    let fence = guard.fence();
    tracing::info!(job, fence, "running a singleton job under its lease");
    let result = tokio::select! {
        r = work(fence) => r,
        reason = guard.lost() => Err(anyhow::anyhow!("job {job} stopped: {reason}")),
    };
    if let Err(e) = guard.release().await {
        tracing::warn!(job, error = %e, "releasing the job's lock failed; it ends at its TTL");
    }
    result
}
