//! A held lease that keeps itself alive and says the moment it is lost.
//!
//! [`LeaseGuard`] extends its lease every third of the TTL in a background task. The lease
//! counts as lost — and [`LeaseGuard::lost`] resolves — as soon as the store says the token no
//! longer holds it, or the local deadline of the last confirmed grant or extension passes
//! without a newer one (the store unreachable, or this process paused: a process resumed after
//! a SIGSTOP or a long GC pause sees the deadline passed before it sends anything). The
//! deadline is measured on the monotonic clock, which keeps running while a process is
//! stopped. A lost lease is never regained: acquire again, and get a new fence.
//!
//! Losing the lease cannot stop a write that is already on its way; that is what the fence is
//! for ([`super::fenced`]).

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Lease, LockError, Locks};

pub struct LeaseGuard {
    lease: Lease,
    locks: Locks,
    lost: watch::Receiver<Option<String>>,
    task: JoinHandle<()>,
}

impl LeaseGuard {
    /// Starts keeping `lease` alive through `locks`.
    pub fn start(locks: Locks, lease: Lease) -> Self {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(keep_alive(locks.clone(), lease.clone(), tx));
        Self {
            lease,
            locks,
            lost: rx,
            task,
        }
    }

    pub fn name(&self) -> &str {
        &self.lease.name
    }

    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// The fence of the grant: pass it with every write to a fenced resource.
    pub fn fence(&self) -> u64 {
        self.lease.fence
    }

    /// Why the lease was lost, once it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// A receiver that turns `Some(reason)` the moment the lease is lost.
    pub fn watch_lost(&self) -> watch::Receiver<Option<String>> {
        self.lost.clone()
    }

    /// Resolves with the reason once the lease is lost.
    pub async fn lost(&self) -> String {
        let mut rx = self.lost.clone();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(r) => r.clone().unwrap_or_default(),
            Err(_) => "the lease keeper stopped".to_owned(),
        };
        reason
    }

    /// Stops extending and releases the lease (a lease already lost is reported as such).
    pub async fn release(self) -> Result<(), LockError> {
        self.task.abort();
        self.locks
            .release(&self.lease.name, &self.lease.token)
            .await
    }
}

impl Drop for LeaseGuard {
    /// Stops extending; the lease then ends at its expiry.
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep_alive(locks: Locks, lease: Lease, lost: watch::Sender<Option<String>>) {
    let ttl = lease.ttl;
    let every = (ttl / 3).max(Duration::from_millis(1));
    let mut valid_until = lease.valid_until;
    let mut next = Instant::now() + every;
    loop {
        tokio::time::sleep_until(next.min(valid_until).into()).await;
        if Instant::now() >= valid_until {
            let _ = lost.send(Some(format!(
                "the lease on {:?} ended before it could be extended",
                lease.name
            )));
            return;
        }
        let extend = locks.extend(&lease.name, &lease.token, ttl);
        let answer = tokio::time::timeout_at(valid_until.into(), extend).await;
        match answer {
            Ok(Ok(extended)) => {
                // Only trust the new deadline if it was confirmed before the old one passed.
                valid_until = extended.valid_until;
                next = Instant::now() + every;
            }
            Ok(Err(LockError::NotHolder(_))) => {
                let _ = lost.send(Some(format!(
                    "the lease on {:?} was lost: the store says this token no longer holds it",
                    lease.name
                )));
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(lock = %lease.name, error = %e, "extending a lease failed; retrying");
                next = Instant::now() + (every / 4).max(Duration::from_millis(1));
            }
            Err(_) => {} // the deadline passed while extending: reported at the loop's top
        }
    }
}
