//! Lock clients beside the storm, and what their history must show.
//!
//! A fence granted twice, or a lease handed to a second owner while the first still runs,
//! only shows when somebody takes locks while the faults land. Three clients contend for two
//! names through `/v1/locks` of any live instance (picked at random per call, as a client
//! behind a load balancer does): each takes a lease of 0.4–1.2 s, writes a fence-guarded
//! record to a resource that remembers the highest fence, sometimes extends, sometimes
//! pauses past its lease and writes again (the stale holder of Kleppmann's example), and
//! releases or lets the lease run out.
//!
//! The resource is PostgreSQL's `job_fences` through [`crate::ledger::fences`] (the one the
//! pipeline's reclaim uses) where the deployment has PostgreSQL; the embedded deployment has
//! none, so its clients write nothing and only their grants are checked. [`check`] then holds
//! the history to
//! `docs/LOCKS.md`: no fence granted twice per name; a grant answered before another was sent
//! has the lower fence; no grant answered while an earlier lease was surely still running
//! (before its local end: sent + TTL, extended by each answered extend, or the send of a
//! release that was answered or went unanswered) unless the deployment does not promise it (an asynchronous replica promoted); and no
//! write accepted by the resource after a write with a higher fence was answered accepted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::finding::Finding;
use crate::lock::http::HttpLocks;
use crate::lock::{fenced, Attempt, LockBackend, LockError};

/// One grant as a client saw it.
#[derive(Debug, Clone)]
pub struct Grant {
    pub name: String,
    pub fence: u64,
    pub sent: Instant,
    pub answered: Instant,
    /// The latest moment the lease surely ran until (see the module docs).
    pub end: Instant,
    /// The extends answered, as (sent, answered).
    pub extended: Vec<(Instant, Instant)>,
}

/// One fenced write answered by the resource.
#[derive(Debug, Clone)]
pub struct Write {
    pub name: String,
    pub fence: u64,
    pub sent: Instant,
    pub answered: Instant,
    pub accepted: bool,
}

/// Everything the lock clients did.
#[derive(Debug, Default)]
pub struct History {
    pub grants: Vec<Grant>,
    pub writes: Vec<Write>,
    pub extends: u64,
    pub releases: u64,
    pub stale_writes_refused: u64,
    /// Calls that got no decision (an instance down, 503): retried later.
    pub unavailable: u64,
}

const NAMES: [&str; 2] = ["chaos-lock-a", "chaos-lock-b"];

/// Stores count a lease's end in whole wall-clock milliseconds while the client compares
/// monotonic instants: an overlap shorter than this is not reported.
const SLACK: Duration = Duration::from_millis(5);

/// Runs three lock clients against `urls` until `stop`; their history. `pg_url`: the
/// resource is PostgreSQL's `job_fences` (rows keyed by `tag` and the lock name).
pub async fn run(
    urls: Vec<String>,
    token: String,
    pg_url: Option<String>,
    tag: String,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> History {
    let history = Arc::new(Mutex::new(History::default()));
    let stores: Arc<Vec<HttpLocks>> =
        Arc::new(urls.iter().map(|u| HttpLocks::new(u, &token)).collect());
    let tasks: Vec<_> = (0..3u64)
        .map(|i| {
            let (stores, history, stop) = (stores.clone(), history.clone(), stop.clone());
            let (pg_url, tag) = (pg_url.clone(), tag.clone());
            tokio::spawn(async move {
                let mut c = ClientRun {
                    rng: StdRng::seed_from_u64(seed ^ 0x10c5 ^ i),
                    owner: format!("chaos-{i}"),
                    stores,
                    resource: Resource {
                        pg_url,
                        tag,
                        conn: None,
                    },
                    history,
                };
                while !stop.load(Ordering::Acquire) {
                    c.cycle().await;
                }
            })
        })
        .collect();
    for t in tasks {
        if let Err(e) = t.await {
            tracing::error!(error = %e, "a lock client panicked");
        }
    }
    let taken = std::mem::take(&mut *history.lock());
    taken
}

struct ClientRun {
    rng: StdRng,
    owner: String,
    stores: Arc<Vec<HttpLocks>>,
    resource: Resource,
    history: Arc<Mutex<History>>,
}

impl ClientRun {
    fn store(&mut self) -> &HttpLocks {
        &self.stores[self.rng.gen_range(0..self.stores.len())]
    }

    /// One lease: acquire, write, maybe extend or pause past it, write again, release.
    async fn cycle(&mut self) {
        let name = NAMES[self.rng.gen_range(0..NAMES.len())];
        let ttl = Duration::from_millis(self.rng.gen_range(400..=1_200));
        let sent = Instant::now();
        let owner = self.owner.clone();
        let lease = match self.store().try_acquire(name, &owner, ttl).await {
            Ok(Attempt::Granted(l)) => l,
            Ok(Attempt::Held { retry_after }) => {
                tokio::time::sleep(retry_after.clamp(Duration::from_millis(20), ttl)).await;
                return;
            }
            Err(_) => {
                self.history.lock().unavailable += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                return;
            }
        };
        let answered = Instant::now();
        let mut end = lease.valid_until;
        let index = {
            let mut h = self.history.lock();
            h.grants.push(Grant {
                name: name.into(),
                fence: lease.fence,
                sent,
                answered,
                end,
                extended: Vec::new(),
            });
            h.grants.len() - 1
        };
        self.write(name, lease.fence).await;
        if self.rng.gen_bool(0.3) {
            let sent = Instant::now();
            if self.store().extend(name, &lease.token, ttl).await.is_ok() {
                end = end.max(sent + ttl);
                let mut h = self.history.lock();
                h.extends += 1;
                h.grants[index].end = end;
                h.grants[index].extended.push((sent, Instant::now()));
            }
        }
        if self.rng.gen_bool(0.2) {
            // A pause past the lease (a GC pause, a frozen VM), then the stale holder writes.
            tokio::time::sleep_until((end + ttl / 2).into()).await;
            if self.write(name, lease.fence).await == Some(false) {
                self.history.lock().stale_writes_refused += 1;
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(self.rng.gen_range(20..=150))).await;
        if Instant::now() < end {
            self.write(name, lease.fence).await;
        }
        if self.rng.gen_bool(0.8) {
            let sent = Instant::now();
            let released = self.store().release(name, &lease.token).await;
            let mut h = self.history.lock();
            match released {
                Ok(()) => h.releases += 1,
                // The lease had already run out: its end stays where it was.
                Err(LockError::NotHolder(_)) => return,
                // Unanswered: the release may have landed as soon as it was sent.
                Err(_) => h.unavailable += 1,
            }
            h.grants[index].end = sent.min(end);
        }
    }

    /// A fenced write to the resource; whether it was accepted (None: no answer).
    async fn write(&mut self, name: &str, fence: u64) -> Option<bool> {
        let sent = Instant::now();
        let accepted = self.resource.write(name, fence).await?;
        self.history.lock().writes.push(Write {
            name: name.into(),
            fence,
            sent,
            answered: Instant::now(),
            accepted,
        });
        Some(accepted)
    }
}

/// The fenced resource: PostgreSQL's `job_fences` (embedded: none, every write is `None`).
struct Resource {
    pg_url: Option<String>,
    tag: String,
    conn: Option<sqlx::PgConnection>,
}

impl Resource {
    async fn write(&mut self, name: &str, fence: u64) -> Option<bool> {
        use sqlx::Connection;
        let url = self.pg_url.as_ref()?;
        if self.conn.is_none() {
            self.conn = sqlx::PgConnection::connect(url).await.ok();
        }
        let job = format!("{}-{name}", self.tag);
        match fenced::check_and_set(self.conn.as_mut()?, &job, fence).await {
            Ok(accepted) => Some(accepted),
            Err(_) => {
                self.conn = None;
                None
            }
        }
    }
}

/// The history held to the promises of `docs/LOCKS.md` (see the module docs); `exclusive`:
/// the deployment promises that no lease is granted while another runs. `restored`: the
/// windows of snapshot restores, which may forget a lease whose grant or an extend of which
/// the Redis they replaced decided: such a lease is not held exclusive, every other is (the
/// snapshot keeps the leases decided before it, with their expiry).
pub fn check(h: &History, exclusive: bool, restored: &[super::rewind::Window]) -> Vec<Finding> {
    let forgotten = |g: &Grant| {
        restored.iter().any(|w| {
            w.contains(g.sent, g.answered) || g.extended.iter().any(|(s, a)| w.contains(*s, *a))
        })
    };
    let mut out = Vec::new();
    let mut by_name: HashMap<&str, Vec<&Grant>> = HashMap::new();
    for g in &h.grants {
        by_name.entry(g.name.as_str()).or_default().push(g);
    }
    for (name, grants) in &by_name {
        for (i, a) in grants.iter().enumerate() {
            for b in &grants[i + 1..] {
                let (a, b) = if a.fence <= b.fence { (a, b) } else { (b, a) };
                if a.fence == b.fence {
                    out.push(lock_finding(format!(
                        "lock {name}: fence {} granted twice",
                        a.fence
                    )));
                } else if b.answered < a.sent {
                    out.push(lock_finding(format!(
                        "lock {name}: fence {} was answered before fence {} was asked for",
                        b.fence, a.fence
                    )));
                } else if exclusive {
                    // b granted after a (its fence is higher, or it was asked for once a was
                    // answered) and answered before a's lease surely ended; and the other way
                    // round by the order of the requests alone.
                    for (x, y, by_fence) in [(a, b, true), (b, a, false)] {
                        if (by_fence || y.sent >= x.answered)
                            && y.answered + SLACK < x.end
                            && !forgotten(x)
                        {
                            out.push(lock_finding(format!(
                                "lock {name}: fence {} granted {:.0} ms before the lease of \
                                 fence {} could have ended",
                                y.fence,
                                (x.end - y.answered).as_secs_f64() * 1e3,
                                x.fence
                            )));
                        }
                    }
                }
            }
        }
    }
    for w in h.writes.iter().filter(|w| w.accepted) {
        if let Some(higher) = h
            .writes
            .iter()
            .find(|x| x.accepted && x.name == w.name && x.fence > w.fence && x.answered < w.sent)
        {
            out.push(lock_finding(format!(
                "lock {}: the resource accepted fence {} after it had accepted fence {}",
                w.name, w.fence, higher.fence
            )));
        }
    }
    out
}

fn lock_finding(what: String) -> Finding {
    Finding {
        what,
        orders: vec![],
    }
}

#[cfg(test)]
mod tests;
