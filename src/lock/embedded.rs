//! The embedded lock backend: leases in the SQLite ledger of the embedded deployment.
//!
//! Holder, expiry and fence of a name live in one `lock_fences` row, changed by one statement
//! on the ledger's writer connection, durable before the answer. So fences keep increasing
//! after a restart or a crash, and a lease granted before a restart is still held after it
//! (its holder can extend or release it) until it expires. Expiry is judged on the time the
//! process keeps (`crate::clock::steady`), which a step of the system clock while it runs does
//! not move; one taken at a restart does (the fence still tells the holders apart).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{new_token, now_ms, Attempt, Lease, LockBackend, LockError};
use crate::ledger::SqliteLedger;

pub struct EmbeddedLocks {
    ledger: Arc<SqliteLedger>,
}

impl EmbeddedLocks {
    pub fn new(ledger: Arc<SqliteLedger>) -> Self {
        Self { ledger }
    }
}

fn failed(e: anyhow::Error) -> LockError {
    LockError::Unavailable(format!("the SQLite ledger failed: {e:#}"))
}

#[async_trait]
impl LockBackend for EmbeddedLocks {
    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Attempt, LockError> {
        let token = new_token();
        let sent = Instant::now();
        let now = now_ms();
        let ttl_ms = ttl.as_millis() as u64;
        match self
            .ledger
            .lock_acquire(name, &token, owner, ttl_ms, now)
            .await
            .map_err(failed)?
        {
            Ok(fence) => Ok(Attempt::Granted(Lease {
                name: name.to_owned(),
                token,
                fence,
                ttl,
                valid_until: sent + ttl,
                expires_ms: now + ttl_ms,
            })),
            Err(expires_ms) => Ok(Attempt::Held {
                retry_after: Duration::from_millis(expires_ms.saturating_sub(now).max(1)),
            }),
        }
    }

    async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Lease, LockError> {
        let sent = Instant::now();
        let now = now_ms();
        let ttl_ms = ttl.as_millis() as u64;
        let fence = self
            .ledger
            .lock_extend(name, token, ttl_ms, now)
            .await
            .map_err(failed)?
            .ok_or_else(|| LockError::NotHolder(name.to_owned()))?;
        Ok(Lease {
            name: name.to_owned(),
            token: token.to_owned(),
            fence,
            ttl,
            valid_until: sent + ttl,
            expires_ms: now + ttl_ms,
        })
    }

    async fn release(&self, name: &str, token: &str) -> Result<(), LockError> {
        let released = self
            .ledger
            .lock_release(name, token, now_ms())
            .await
            .map_err(failed)?;
        if released {
            Ok(())
        } else {
            Err(LockError::NotHolder(name.to_owned()))
        }
    }

    fn kind(&self) -> &'static str {
        "embedded"
    }
}
