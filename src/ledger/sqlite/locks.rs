//! The `lock_fences` rows of the embedded lock service, written on the ledger's one writer
//! connection (so SQLite still never sees two writers). Each operation is one statement, so it
//! is atomic and, with `synchronous=FULL`, durable before the caller answers: a fence handed
//! out is never handed out again, even after a crash.
//!
//! The statements that return the fence are read to their end (`fetch_all`), never with
//! `fetch_optional`: an autocommit statement commits when it is stepped past its last row, and
//! sqlx resets a statement after the one row `fetch_optional` wants, which drops the commit's
//! error. A full disk or an fsync error then answered "granted" for a fence that was never
//! written, and the next acquire was granted the same fence.

use sqlx::SqliteConnection;

/// Grants `name` to `token` until `now_ms + ttl_ms` if its lease ended; `Ok(fence)` or
/// `Err(expires_ms)` of the current holder.
pub(super) async fn acquire(
    conn: &mut SqliteConnection,
    name: &str,
    token: &str,
    owner: &str,
    ttl_ms: u64,
    now_ms: u64,
) -> anyhow::Result<Result<u64, u64>> {
    let expires = (now_ms + ttl_ms) as i64;
    let granted: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO lock_fences (name, fence, token, owner, expires_ms) VALUES (?1, 1, ?2, ?3, ?4) \
         ON CONFLICT(name) DO UPDATE SET fence = fence + 1, token = excluded.token, \
         owner = excluded.owner, expires_ms = excluded.expires_ms \
         WHERE lock_fences.expires_ms <= ?5 RETURNING fence",
    )
    .bind(name)
    .bind(token)
    .bind(owner)
    .bind(expires)
    .bind(now_ms as i64)
    .fetch_all(&mut *conn)
    .await?;
    if let Some(fence) = granted.first() {
        return Ok(Ok(*fence as u64));
    }
    let held: i64 = sqlx::query_scalar("SELECT expires_ms FROM lock_fences WHERE name = ?1")
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
    Ok(Err(held as u64))
}

/// Moves the end of `token`'s live lease on `name` to `now_ms + ttl_ms`; its fence, or `None`
/// when `token` does not hold the lock.
pub(super) async fn extend(
    conn: &mut SqliteConnection,
    name: &str,
    token: &str,
    ttl_ms: u64,
    now_ms: u64,
) -> anyhow::Result<Option<u64>> {
    let fence: Vec<i64> = sqlx::query_scalar(
        "UPDATE lock_fences SET expires_ms = ?3 \
         WHERE name = ?1 AND token = ?2 AND expires_ms > ?4 RETURNING fence",
    )
    .bind(name)
    .bind(token)
    .bind((now_ms + ttl_ms) as i64)
    .bind(now_ms as i64)
    .fetch_all(&mut *conn)
    .await?;
    Ok(fence.first().map(|f| *f as u64))
}

/// Ends `token`'s live lease on `name` (the fence stays); false when `token` does not hold it.
pub(super) async fn release(
    conn: &mut SqliteConnection,
    name: &str,
    token: &str,
    now_ms: u64,
) -> anyhow::Result<bool> {
    let done = sqlx::query(
        "UPDATE lock_fences SET token = NULL, owner = NULL, expires_ms = 0 \
         WHERE name = ?1 AND token = ?2 AND expires_ms > ?3",
    )
    .bind(name)
    .bind(token)
    .bind(now_ms as i64)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}
