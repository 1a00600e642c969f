//! Redlock across N independent Redis masters (`--lock-redis URL,URL,URL`), with fences.
//!
//! A grant runs `acquire.lua` on every master at once with one token; it holds when a majority
//! granted it and the time spent is below the TTL minus a clock-drift allowance (1 % of the
//! TTL + 2 ms); the lease is then valid until `start + ttl − drift` by the local clock. Its
//! fence is the highest fence any granting master handed out, and it is written back
//! (`raise.lua`) to the granting masters — only while they still hold the lease — before the
//! grant is answered; a majority must take it. A later grant needs a majority too, so it goes
//! through at least one master that took the write-back after the earlier lease ended there,
//! and that master answers a higher fence. Every other outcome releases on all masters.
//! Release and extension go to all masters; an extension holds with a majority.
//!
//! Each master is a lazily (re)connected multiplexed connection with short timeouts, so a
//! master that is down costs a refused connection or one timeout, never a hang. What this
//! survives and what it does not is in docs/LOCKS.md.

use std::future::Future;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};

use super::scripts::{Acquired, LockScripts};
use super::{new_token, now_ms, Attempt, Lease, LockBackend, LockError};

struct Node {
    url: String,
    client: redis::Client,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl Node {
    /// Runs `op` on this master within `limit` (connecting first if needed); a failed call
    /// drops the connection so the next one reconnects.
    async fn run<T, F, Fut>(&self, limit: Duration, op: F) -> RedisResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let timeout_err = || redis::RedisError::from((redis::ErrorKind::Io, "lock node timed out"));
        let attempt = async {
            let conn = {
                let mut slot = self.conn.lock().await;
                match slot.as_ref() {
                    Some(c) => c.clone(),
                    None => {
                        let cfg = AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(limit))
                            .set_response_timeout(Some(limit));
                        let c = self
                            .client
                            .get_multiplexed_async_connection_with_config(&cfg)
                            .await?;
                        *slot = Some(c.clone());
                        c
                    }
                }
            };
            op(conn).await
        };
        let result = tokio::time::timeout(limit, attempt)
            .await
            .unwrap_or_else(|_| Err(timeout_err()));
        if result.is_err() {
            *self.conn.lock().await = None;
        }
        result
    }
}

pub struct Redlock {
    nodes: Vec<Node>,
    scripts: LockScripts,
}

impl Redlock {
    /// Masters at `urls` (independent servers, not replicas of each other). Nothing connects
    /// yet: a master that is down at start is only one vote missing.
    pub fn new(urls: &[String]) -> anyhow::Result<Self> {
        anyhow::ensure!(!urls.is_empty(), "--lock-redis needs at least one URL");
        let nodes = urls
            .iter()
            .map(|u| {
                let client = crate::redis_conn::tls::client(u.as_str())
                    .map_err(|e| anyhow::anyhow!("invalid --lock-redis URL {u:?}: {e}"))?;
                Ok(Node {
                    url: u.clone(),
                    client,
                    conn: tokio::sync::Mutex::new(None),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            nodes,
            scripts: LockScripts::default(),
        })
    }

    /// Votes a grant needs.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// How long one master may take: a tenth of the TTL, within 5 … 250 ms.
    fn node_timeout(ttl: Duration) -> Duration {
        (ttl / 10).clamp(Duration::from_millis(5), Duration::from_millis(250))
    }

    /// The clock-drift allowance of a lease.
    pub fn drift(ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(2)
    }

    async fn release_all(
        &self,
        name: &str,
        token: &str,
        limit: Duration,
    ) -> Vec<RedisResult<bool>> {
        join_all(self.nodes.iter().map(|n| {
            n.run(limit, |mut c| async move {
                self.scripts.release(&mut c, name, token).await
            })
        }))
        .await
    }

    fn no_majority(&self, answered: usize) -> LockError {
        LockError::Unavailable(format!(
            "only {answered} of {} lock masters answered; a majority of {} is needed",
            self.nodes.len(),
            self.quorum()
        ))
    }
}

#[async_trait]
impl LockBackend for Redlock {
    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Attempt, LockError> {
        let token = new_token();
        let ttl_ms = ttl.as_millis() as u64;
        let limit = Self::node_timeout(ttl);
        let drift = Self::drift(ttl);
        let start = Instant::now();
        let wall = now_ms();
        let tok = token.as_str();
        let answers = join_all(self.nodes.iter().map(|n| {
            n.run(limit, |mut c| async move {
                self.scripts.acquire(&mut c, name, tok, ttl_ms, owner).await
            })
        }))
        .await;
        let mut granted = Vec::new();
        let mut held: Option<u64> = None;
        let mut answered = 0;
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(Acquired::Granted { fence }) => {
                    answered += 1;
                    granted.push((i, fence));
                }
                Ok(Acquired::Held { pttl_ms }) => {
                    answered += 1;
                    held = Some(held.map_or(pttl_ms, |h| h.min(pttl_ms)));
                }
                Err(e) => {
                    tracing::debug!(node = %self.nodes[i].url, error = %e, "lock master failed")
                }
            }
        }
        if granted.len() >= self.quorum() {
            let fence = granted.iter().map(|(_, f)| *f).max().unwrap_or(0);
            let raised = join_all(granted.iter().map(|(i, _)| {
                self.nodes[*i].run(limit, |mut c| async move {
                    self.scripts.raise(&mut c, name, tok, fence).await
                })
            }))
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(true)))
            .count();
            if raised >= self.quorum() && start.elapsed() + drift < ttl {
                return Ok(Attempt::Granted(Lease {
                    name: name.to_owned(),
                    token,
                    fence,
                    ttl,
                    valid_until: start + ttl - drift,
                    expires_ms: wall + ttl_ms - drift.as_millis() as u64,
                }));
            }
        }
        // No grant: give back whatever was taken, on every master.
        if !granted.is_empty() {
            self.release_all(name, tok, limit).await;
        }
        if answered < self.quorum() {
            return Err(self.no_majority(answered));
        }
        let retry = held.unwrap_or(5 + rand::random::<u64>() % 20);
        Ok(Attempt::Held {
            retry_after: Duration::from_millis(retry.max(1)),
        })
    }

    async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Lease, LockError> {
        let ttl_ms = ttl.as_millis() as u64;
        let limit = Self::node_timeout(ttl);
        let drift = Self::drift(ttl);
        let start = Instant::now();
        let wall = now_ms();
        let answers = join_all(self.nodes.iter().map(|n| {
            n.run(limit, |mut c| async move {
                self.scripts.extend(&mut c, name, token, ttl_ms).await
            })
        }))
        .await;
        let fences: Vec<u64> = answers.iter().filter_map(|a| *a.as_ref().ok()?).collect();
        let failed = answers.iter().filter(|a| a.is_err()).count();
        if fences.len() >= self.quorum() && start.elapsed() + drift < ttl {
            return Ok(Lease {
                name: name.to_owned(),
                token: token.to_owned(),
                fence: fences.iter().copied().max().unwrap_or(0),
                ttl,
                valid_until: start + ttl - drift,
                expires_ms: wall + ttl_ms - drift.as_millis() as u64,
            });
        }
        if fences.len() + failed >= self.quorum() && failed > 0 {
            Err(self.no_majority(self.nodes.len() - failed))
        } else {
            Err(LockError::NotHolder(name.to_owned()))
        }
    }

    async fn release(&self, name: &str, token: &str) -> Result<(), LockError> {
        let answers = self
            .release_all(name, token, Duration::from_millis(250))
            .await;
        let answered = answers.iter().filter(|a| a.is_ok()).count();
        if answers.iter().any(|a| matches!(a, Ok(true))) {
            Ok(())
        } else if answered >= self.quorum() {
            Err(LockError::NotHolder(name.to_owned()))
        } else {
            Err(self.no_majority(answered))
        }
    }

    fn kind(&self) -> &'static str {
        "redlock"
    }
}
