//! The in-process rate limiter of the embedded deployment: GCRA over a bounded, sharded table.
//!
//! Why not a generic keyed limiter crate: the keys here come from the request (user ids, IPs),
//! so an attacker controls how many there are. This table has a hard cap on keys, and it can
//! forget keys without losing anything: a GCRA key whose theoretical arrival time (TAT) is in
//! the past behaves exactly like a key never seen, so sweeping those is lossless. The
//! arithmetic is the one the scale-out Redis script must mirror:
//!
//! ```text
//! T = period / count            τ = T · burst
//! tat' = max(tat, now) + T      allow iff tat' − now ≤ τ   (then tat := tat')
//! refused: retry after tat' − now − τ
//! ```
//!
//! When a shard is full of live keys, a request with a new key is refused (`capacity`) rather
//! than evicting someone's live bucket: under a flood of spoofed keys the service degrades to
//! refusing new keys, it never grows without bound and never resets a real user's limit.

use std::collections::hash_map::{Entry, RandomState};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::rate::{Check, Limited, RateLimiter};

const SHARDS: usize = 64;

pub struct LocalLimiter {
    shards: Box<[Mutex<HashMap<u64, u64>>]>,
    per_shard_cap: usize,
    keys: RandomState,
    epoch: Instant,
}

impl LocalLimiter {
    /// A limiter holding at most `max_keys` live buckets (rounded up to a multiple of 64).
    pub fn new(max_keys: usize) -> Arc<Self> {
        Arc::new(Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard_cap: max_keys.div_ceil(SHARDS).max(1),
            keys: RandomState::new(),
            epoch: Instant::now(),
        })
    }

    /// Forgets every key whose TAT has passed (lossless, see the module docs) and every 10 s
    /// thereafter until the limiter is dropped.
    pub fn spawn_sweeper(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                let Some(me) = me.upgrade() else { return };
                me.sweep(me.now());
            }
        });
    }

    /// Live keys in the table.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub fn sweep(&self, now: u64) {
        for shard in self.shards.iter() {
            let mut map = shard.lock();
            map.retain(|_, tat| *tat > now);
            if map.capacity() > 4 * map.len().max(64) {
                map.shrink_to_fit();
            }
        }
    }

    fn key(&self, check: &Check<'_>) -> u64 {
        self.keys.hash_one((check.campaign, check.subject))
    }

    /// [`RateLimiter::acquire`] at a given time (nanoseconds since the limiter's epoch).
    pub fn acquire_at(&self, checks: &[Check<'_>], now: u64) -> Result<(), Limited> {
        let mut charged: Vec<(u64, u64)> = Vec::with_capacity(checks.len());
        for check in checks {
            let key = self.key(check);
            match self.charge(key, check, now) {
                Ok(t) => charged.push((key, t)),
                Err(limited) => {
                    for (key, t) in charged {
                        self.refund(key, t, now);
                    }
                    return Err(limited);
                }
            }
        }
        Ok(())
    }

    fn shard(&self, key: u64) -> &Mutex<HashMap<u64, u64>> {
        &self.shards[(key >> 58) as usize % SHARDS]
    }

    /// Charges one request; returns the emission interval charged.
    fn charge(&self, key: u64, check: &Check<'_>, now: u64) -> Result<u64, Limited> {
        let t = check.rate.emission_interval().as_nanos() as u64;
        let tau = t.saturating_mul(check.rate.burst);
        let mut map = self.shard(key).lock();
        if map.len() >= self.per_shard_cap && !map.contains_key(&key) {
            map.retain(|_, tat| *tat > now);
            if map.len() >= self.per_shard_cap {
                return Err(Limited {
                    label: "capacity",
                    rate: None,
                    retry_after: Duration::from_secs(1),
                    reset: Duration::from_secs(1),
                });
            }
        }
        let tat = map.get(&key).copied().unwrap_or(now).max(now);
        let next = tat.saturating_add(t);
        if next - now > tau {
            let retry = next - now - tau;
            return Err(Limited {
                label: check.label(),
                rate: Some(check.rate),
                retry_after: Duration::from_nanos(retry),
                reset: Duration::from_nanos(tat - now),
            });
        }
        map.insert(key, next);
        Ok(t)
    }

    /// Takes back a charge (another bucket of the same request refused).
    fn refund(&self, key: u64, t: u64, now: u64) {
        let mut map = self.shard(key).lock();
        if let Entry::Occupied(mut e) = map.entry(key) {
            let back = e.get().saturating_sub(t);
            if back <= now {
                e.remove();
            } else {
                e.insert(back);
            }
        }
    }
}

#[async_trait]
impl RateLimiter for LocalLimiter {
    async fn acquire(&self, checks: &[Check<'_>]) -> Result<(), Limited> {
        self.acquire_at(checks, self.now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Rate;
    use crate::guard::rate::Subject;

    const SEC: u64 = 1_000_000_000;

    fn user<'a>(name: &'a str, rate: &str) -> Check<'a> {
        Check {
            campaign: Some("c"),
            subject: Subject::User(name),
            rate: rate.parse::<Rate>().unwrap(),
        }
    }

    /// Counts how many of `n` requests at `at` pass.
    fn fire(l: &LocalLimiter, check: Check<'_>, n: usize, at: u64) -> usize {
        (0..n)
            .filter(|_| l.acquire_at(&[check], at).is_ok())
            .count()
    }

    #[test]
    fn burst_then_steady_rate() {
        let l = LocalLimiter::new(1000);
        let c = user("u1", "5/s");
        assert_eq!(fire(&l, c, 20, 10 * SEC), 5);
        let refused = l.acquire_at(&[c], 10 * SEC).unwrap_err();
        assert_eq!(refused.label, "campaign_per_user");
        assert_eq!(refused.retry_after, Duration::from_millis(200));
        // One more every 200 ms.
        assert_eq!(fire(&l, c, 5, 10 * SEC + SEC / 5), 1);
        assert_eq!(fire(&l, c, 5, 11 * SEC), 4);
    }

    /// The fixed window's flaw: 5 at 0.999 s and 5 more at 1.001 s. GCRA lets through at most
    /// burst + elapsed·rate in any interval, whatever its alignment.
    #[test]
    fn no_double_burst_at_a_window_edge() {
        for edge in [SEC, 7 * SEC, 3600 * SEC] {
            let l = LocalLimiter::new(1000);
            let c = user("u1", "5/s");
            let before = fire(&l, c, 10, edge - SEC / 1000);
            let after = fire(&l, c, 10, edge + SEC / 1000);
            assert_eq!(before, 5);
            assert!(after <= 1, "{after} passed 2 ms after a full burst");
        }
    }

    #[test]
    fn keys_are_independent_and_scoped() {
        let l = LocalLimiter::new(1000);
        assert_eq!(fire(&l, user("u1", "2/h"), 5, SEC), 2);
        assert_eq!(fire(&l, user("u2", "2/h"), 5, SEC), 2);
        let other_campaign = Check {
            campaign: Some("d"),
            ..user("u1", "2/h")
        };
        assert_eq!(fire(&l, other_campaign, 5, SEC), 2);
    }

    #[test]
    fn all_or_nothing_across_buckets() {
        let l = LocalLimiter::new(1000);
        let wide = user("u1", "100/s");
        let narrow = Check {
            campaign: None,
            ..user("u1", "1/h")
        };
        assert!(l.acquire_at(&[wide, narrow], SEC).is_ok());
        for _ in 0..50 {
            assert!(l.acquire_at(&[wide, narrow], SEC).is_err());
        }
        // The refusals did not use up the wide bucket.
        assert_eq!(fire(&l, wide, 200, SEC), 99);
    }

    #[test]
    fn memory_is_bounded_and_expired_keys_are_forgotten() {
        let l = LocalLimiter::new(640);
        let names: Vec<String> = (0..5000).map(|i| format!("spoof-{i}")).collect();
        let passed = names
            .iter()
            .filter(|n| l.acquire_at(&[user(n, "1/s")], SEC).is_ok())
            .count();
        assert!(l.len() <= 640, "{} keys kept", l.len());
        assert!((300..=640).contains(&passed), "{passed} new keys admitted");
        // Once their TATs pass, the keys are dropped and new users get in again.
        assert!(l.acquire_at(&[user("late", "1/s")], 3 * SEC).is_ok());
        l.sweep(3 * SEC);
        assert_eq!(l.len(), 1);
    }
}
