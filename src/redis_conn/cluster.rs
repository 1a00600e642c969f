//! The Redis Cluster connection, made again when it stops answering altogether.
//!
//! redis-rs's async cluster client (1.8) drives every request and its background reconnects
//! in one task, and refreshes its slot map under its connection map's write lock; while the
//! refresh runs it polls nothing else. Since tokio 1.54 a lock acquire that has just been
//! granted its permits may still return `Pending` when the task's cooperative budget is spent,
//! keeping the permits: if that acquire belongs to a request or a reconnect of the same task,
//! the refresh queued behind it waits for a future that is only polled after the refresh, and
//! every request to any slot times out, for good. The fault campaign met it after two failovers
//! of one shard (seed 15, Cluster), under load: one instance answered 503 to everything for over
//! a minute while the other, whose client had not locked up, sold on the same cluster.
//!
//! tokio is held below 1.54 for it (Cargo.toml). As a backstop, a connection whose requests have
//! all timed out for [`STUCK_AFTER`], with no answer of any kind in between (an error reply such
//! as `MOVED` or `CLUSTERDOWN` is an answer: the client works), is replaced by a new one from
//! the same client, which reads the slot map afresh. Requests in flight on the old one end as
//! they would have (timed out, outcome unknown); nothing is resent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisResult, Value};

/// How long every request must have timed out before the connection is made again: two
/// response timeouts, so one slow answer never triggers it.
pub const STUCK_AFTER: Duration = Duration::from_secs(10);

/// A cluster connection and the client to make it again with.
pub struct ClusterLink {
    client: ClusterClient,
    conn: RwLock<ClusterConnection>,
    /// Since when requests have only timed out (`None`: the last one was answered).
    failing_since: Mutex<Option<Instant>>,
    replacing: AtomicBool,
}

impl ClusterLink {
    pub async fn connect(client: ClusterClient) -> RedisResult<Arc<Self>> {
        let conn = client.get_async_connection().await?;
        Ok(Arc::new(Self {
            client,
            conn: RwLock::new(conn),
            failing_since: Mutex::new(None),
            replacing: AtomicBool::new(false),
        }))
    }

    /// The current connection (cheap: a handle to its driver).
    fn current(&self) -> ClusterConnection {
        self.conn.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub async fn request(self: &Arc<Self>, cmd: &Cmd) -> RedisResult<Value> {
        let r = self.current().req_packed_command(cmd).await;
        self.observe(r.as_ref().err());
        r
    }

    pub async fn request_many(
        self: &Arc<Self>,
        cmd: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let r = self.current().req_packed_commands(cmd, offset, count).await;
        self.observe(r.as_ref().err());
        r
    }

    pub fn db(&self) -> i64 {
        self.current().get_db()
    }

    /// Notes how a request ended; starts a replacement once only timeouts were seen for
    /// [`STUCK_AFTER`].
    fn observe(self: &Arc<Self>, err: Option<&redis::RedisError>) {
        let mut since = self.failing_since.lock().unwrap_or_else(|e| e.into_inner());
        if !err.is_some_and(redis::RedisError::is_timeout) {
            *since = None;
            return;
        }
        let first = *since.get_or_insert_with(Instant::now);
        if first.elapsed() < STUCK_AFTER || self.replacing.swap(true, Ordering::AcqRel) {
            return;
        }
        drop(since);
        let this = self.clone();
        tokio::spawn(async move {
            this.replace(first).await;
            this.replacing.store(false, Ordering::Release);
        });
    }

    async fn replace(&self, since: Instant) {
        tracing::warn!(
            timing_out_for_ms = since.elapsed().as_millis() as u64,
            "every Redis Cluster request timed out: making the cluster connection again"
        );
        let fresh = tokio::time::timeout(STUCK_AFTER, self.client.get_async_connection()).await;
        let mut since = self.failing_since.lock().unwrap_or_else(|e| e.into_inner());
        match fresh {
            Ok(Ok(fresh)) => {
                *self.conn.write().unwrap_or_else(|e| e.into_inner()) = fresh;
                *since = None;
                tracing::info!("the Redis Cluster connection was made again");
            }
            failed => {
                // Tried again only after another STUCK_AFTER of timeouts.
                *since = Some(Instant::now());
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no connection within {STUCK_AFTER:?}"),
                };
                tracing::warn!(%error, "making the Redis Cluster connection again failed");
            }
        }
    }
}
