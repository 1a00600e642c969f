//! Leases with fencing tokens: the locks of the services around a sale, and of seckill's own
//! jobs that must run once.
//!
//! Seeds 001 and 003 guard work with Redis locks (`SETNX` + expiry, `GETSET`, "Redlock
//! (TODO)"). Every such lock is unsafe on its own: a holder that pauses past its expiry (a GC
//! pause, a stopped VM) wakes up believing it still holds the lock and writes. No lock service
//! can prevent that; what it can do is hand out with every grant a **fence** that strictly
//! increases per lock name, so the resource the holder writes to refuses a write whose fence
//! is lower than the highest it has seen (Kleppmann, "How to do distributed locking").
//! [`fenced`] is such a resource check on PostgreSQL.
//!
//! One behaviour, three backends behind [`LockBackend`]:
//! - [`embedded`]: the SQLite ledger of the embedded deployment keeps holder and fence of
//!   each name in one row, written durably before the grant is answered;
//! - [`redis`]: one Redis, a Sentinel-managed primary or a Cluster; one Lua script per
//!   operation, holder and fence counter in one hash-tagged slot;
//! - [`redlock`]: N independent Redis masters; a grant needs a majority, its fence is written
//!   back to a majority.
//!
//! [`http`] speaks the HTTP contract of a running seckill (`/v1/locks/…`) as a fourth
//! [`LockBackend`], so `seckill lock run` works the same against a server or against Redis.
//! [`singleton::run_once`] runs seckill's own run-once jobs (the scale-out start-up reconcile)
//! under a lease, with the fence recorded in PostgreSQL's `job_fences` first; the pipeline's
//! takeover of stalled consumers' orders holds a lease of its own and writes under its fence
//! (`crate::pipeline`, `consumer/reclaim.rs`).
//! [`Locks`] adds waiting (`wait`) on top of any backend, and [`guard::LeaseGuard`] extends a
//! lease in the background and says the moment it is lost. docs/LOCKS.md states what each
//! backend guarantees.

pub mod embedded;
/// Fenced writes to PostgreSQL (`job_fences`), kept by the ledger.
pub use crate::ledger::fences as fenced;
pub mod guard;
pub mod http;
pub mod redis;
pub mod redlock;
mod scripts;
pub mod singleton;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::domain::validate_campaign_id;
pub use guard::LeaseGuard;

/// Shortest and longest lease (`ttl_ms` of the API).
pub const MIN_TTL_MS: u64 = 1;
pub const MAX_TTL_MS: u64 = 3_600_000;
/// Longest time an acquire may wait for the lock (`wait_ms` of the API).
pub const MAX_WAIT_MS: u64 = 60_000;
/// Longest token and owner accepted.
pub const MAX_TOKEN: usize = 128;
pub const MAX_OWNER: usize = 128;

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Bad input: nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// The token does not hold the lock (expired, released, or never held it).
    #[error("the token does not hold lock {0:?} (expired, released or never granted)")]
    NotHolder(String),
    /// The lock store could not decide (unreachable, no majority): nothing is held.
    #[error("lock store unavailable: {0}")]
    Unavailable(String),
}

impl From<crate::domain::Error> for LockError {
    fn from(e: crate::domain::Error) -> Self {
        LockError::Invalid(e.to_string())
    }
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    /// Proof of ownership: only this token extends or releases the lease.
    pub token: String,
    /// Strictly increases with every grant of `name`; pass it to the resource you write.
    pub fence: u64,
    /// The lease's TTL as granted; it is valid until `acquired_at + ttl` at the latest
    /// (Redlock subtracts its clock-drift allowance).
    pub ttl: Duration,
    /// Local time the acquire was sent: the lease ends no later than `valid_until`.
    pub valid_until: Instant,
    /// Wall-clock end of the lease in ms since the Unix epoch, as the store sees it.
    pub expires_ms: u64,
}

/// The result of one acquire attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Granted(Lease),
    /// Another owner holds the lock for about this long.
    Held {
        retry_after: Duration,
    },
}

/// What a lock store must do; each call is one atomic step of the store.
#[async_trait]
pub trait LockBackend: Send + Sync + 'static {
    /// Grants `name` for `ttl` if nobody holds it, with a new fence.
    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Attempt, LockError>;
    /// Sets the lease's TTL to `ttl` from now if `token` still holds it; its end.
    async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Lease, LockError>;
    /// Deletes the lease if `token` holds it (compare-and-delete).
    async fn release(&self, name: &str, token: &str) -> Result<(), LockError>;
    /// Short name of the backend for logs and reports.
    fn kind(&self) -> &'static str;
}

/// A lock name: the rules of campaign ids (1–64 of `[A-Za-z0-9_-]`).
pub fn validate_name(name: &str) -> Result<(), LockError> {
    validate_campaign_id(name).map_err(|e| LockError::Invalid(format!("lock name: {e}")))
}

/// `ttl_ms` within 1 … 3,600,000.
pub fn validate_ttl_ms(ttl_ms: u64) -> Result<Duration, LockError> {
    if !(MIN_TTL_MS..=MAX_TTL_MS).contains(&ttl_ms) {
        return Err(LockError::Invalid(format!(
            "ttl_ms must be between {MIN_TTL_MS} and {MAX_TTL_MS}, got {ttl_ms}"
        )));
    }
    Ok(Duration::from_millis(ttl_ms))
}

/// `wait_ms` within 0 … 60,000.
pub fn validate_wait_ms(wait_ms: u64) -> Result<Duration, LockError> {
    if wait_ms > MAX_WAIT_MS {
        return Err(LockError::Invalid(format!(
            "wait_ms must be between 0 and {MAX_WAIT_MS}, got {wait_ms}"
        )));
    }
    Ok(Duration::from_millis(wait_ms))
}

/// A token or owner: 1–128 printable bytes.
pub fn validate_text(what: &str, s: &str, max: usize) -> Result<(), LockError> {
    if s.is_empty() || s.len() > max {
        return Err(LockError::Invalid(format!(
            "{what} must be 1 to {max} bytes, got {}",
            s.len()
        )));
    }
    if s.chars().any(|c| c.is_control()) {
        return Err(LockError::Invalid(format!(
            "{what} must not contain control characters"
        )));
    }
    Ok(())
}

/// A fresh random token (128 bits, hex).
pub fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Milliseconds since the epoch on the time seckill keeps ([`crate::clock::steady`]): a step
/// of the system clock must not end or stretch a lease.
pub(crate) fn now_ms() -> u64 {
    u64::try_from(crate::clock::steady().timestamp_millis()).unwrap_or(0)
}

/// Any [`LockBackend`] with input checks and waiting: the API other Rust services use.
#[derive(Clone)]
pub struct Locks {
    backend: Arc<dyn LockBackend>,
}

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Locks({})", self.backend.kind())
    }
}

impl Locks {
    pub fn new(backend: Arc<dyn LockBackend>) -> Self {
        Self { backend }
    }

    pub fn kind(&self) -> &'static str {
        self.backend.kind()
    }

    /// Tries to acquire `name` for `ttl`, retrying while another owner holds it for up to
    /// `wait`. `Held` after `wait` has passed.
    pub async fn acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Attempt, LockError> {
        validate_name(name)?;
        validate_text("owner", owner, MAX_OWNER)?;
        validate_ttl_ms(ttl.as_millis() as u64)?;
        validate_wait_ms(wait.as_millis() as u64)?;
        let deadline = Instant::now() + wait;
        loop {
            match self.backend.try_acquire(name, owner, ttl).await? {
                Attempt::Granted(lease) => return Ok(Attempt::Granted(lease)),
                Attempt::Held { retry_after } => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(Attempt::Held { retry_after });
                    }
                    // Poll at most every 50 ms with jitter, so waiters do not move in step.
                    let jitter = Duration::from_millis(rand::random::<u64>() % 10);
                    let nap = retry_after
                        .min(Duration::from_millis(50))
                        .max(Duration::from_millis(2))
                        + jitter;
                    tokio::time::sleep(nap.min(deadline - now)).await;
                }
            }
        }
    }

    pub async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Lease, LockError> {
        validate_name(name)?;
        validate_text("token", token, MAX_TOKEN)?;
        validate_ttl_ms(ttl.as_millis() as u64)?;
        self.backend.extend(name, token, ttl).await
    }

    pub async fn release(&self, name: &str, token: &str) -> Result<(), LockError> {
        validate_name(name)?;
        validate_text("token", token, MAX_TOKEN)?;
        self.backend.release(name, token).await
    }

    /// Acquires (waiting up to `wait`) and keeps the lease alive in the background; `None`
    /// when another owner still holds it after `wait`.
    pub async fn hold(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Option<LeaseGuard>, LockError> {
        match self.acquire(name, owner, ttl, wait).await? {
            Attempt::Granted(lease) => Ok(Some(LeaseGuard::start(self.clone(), lease))),
            Attempt::Held { .. } => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_rules_of_the_lock_api() {
        assert!(validate_name("nightly-report_2").is_ok());
        for bad in ["", "a b", "café", "x{y}", &"n".repeat(65)] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_ttl_ms(0).is_err());
        assert!(validate_ttl_ms(1).is_ok());
        assert!(validate_ttl_ms(MAX_TTL_MS).is_ok());
        assert!(validate_ttl_ms(MAX_TTL_MS + 1).is_err());
        assert!(validate_wait_ms(MAX_WAIT_MS).is_ok());
        assert!(validate_wait_ms(MAX_WAIT_MS + 1).is_err());
        assert!(validate_text("owner", "w7", MAX_OWNER).is_ok());
        assert!(validate_text("owner", "", MAX_OWNER).is_err());
        assert!(validate_text("owner", "a\nb", MAX_OWNER).is_err());
        assert!(validate_text("token", &"t".repeat(129), MAX_TOKEN).is_err());
        assert_ne!(new_token(), new_token());
    }
}
