//! A fenced resource on PostgreSQL: the `job_fences` table remembers, per job, the highest
//! fence a write carried, and refuses a write whose fence is lower.
//!
//! A job holding a lease calls [`check_and_set`] inside the transaction of its own writes: the
//! row lock taken by the upsert orders concurrent writers, and a refused write rolls the whole
//! transaction back, so the work of a holder whose lease passed to someone else never lands.
//! Equal fences pass (one holder writes many times with one fence).

use sqlx::PgConnection;

/// Records `fence` for `job`; `Ok(false)` (and nothing written) when a higher fence was seen.
pub async fn check_and_set(conn: &mut PgConnection, job: &str, fence: u64) -> sqlx::Result<bool> {
    let fence = i64::try_from(fence).unwrap_or(i64::MAX);
    let row: Option<i64> = sqlx::query_scalar(
        "INSERT INTO job_fences (job, fence) VALUES ($1, $2) \
         ON CONFLICT (job) DO UPDATE SET fence = EXCLUDED.fence, written_at = now() \
         WHERE job_fences.fence <= EXCLUDED.fence RETURNING fence",
    )
    .bind(job)
    .bind(fence)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.is_some())
}

/// A fenced write refused: a later holder of the job's lease has written with a higher fence.
#[derive(Debug, thiserror::Error)]
#[error("job {job}: fence {fence} is lower than the highest recorded; nothing was written")]
pub struct StaleFence {
    pub job: String,
    pub fence: u64,
}

/// [`check_and_set`] as a precondition of the caller's transaction: a lower fence is the error
/// [`StaleFence`], and the caller's `?` drops (rolls back) the transaction.
pub async fn require(conn: &mut PgConnection, job: &str, fence: u64) -> anyhow::Result<()> {
    if check_and_set(conn, job, fence).await? {
        return Ok(());
    }
    Err(StaleFence {
        job: job.to_owned(),
        fence,
    }
    .into())
}

/// The highest fence `job` has written with, if any.
pub async fn highest(conn: &mut PgConnection, job: &str) -> sqlx::Result<Option<u64>> {
    let f: Option<i64> = sqlx::query_scalar("SELECT fence FROM job_fences WHERE job = $1")
        .bind(job)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(f.map(|f| f as u64))
}
