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
//! When the table is full it forgets the buckets charged least recently, never refuses a new
//! key. Refusing new keys (what this table did before) let anyone lock real buyers out: with
//! `--rate-per-user 1/h`, 3,000 claims with made-up user ids filled a 640-key table and alice's
//! first claim answered 429 for up to an hour. Forgetting a bucket only loosens a rate for that
//! key (it starts afresh); the per-user limit of a campaign is the engine's and is never
//! forgotten. Each shard keeps two generations: charges go to the young one, a key found in the
//! old one moves to the young one, and when the young one is half the shard's share it becomes
//! the old one and the old one is dropped (counted in `seckill_rate_keys_evicted_total` when
//! its buckets were still live). O(1) per charge, at most `max_keys` buckets.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::rate::{Check, Limited, RateLimiter};

const SHARDS: usize = 64;

/// One shard's buckets (key → TAT) in two generations.
#[derive(Default)]
struct Shard {
    young: HashMap<u64, u64>,
    old: HashMap<u64, u64>,
}

impl Shard {
    fn get(&self, key: u64) -> Option<u64> {
        self.young.get(&key).or_else(|| self.old.get(&key)).copied()
    }

    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Stores `tat` for `key` in the young generation; when it reaches `half`, it becomes the
    /// old one and the old one is forgotten. Returns the live buckets forgotten.
    fn put(&mut self, key: u64, tat: u64, half: usize, now: u64) -> u64 {
        self.old.remove(&key);
        self.young.insert(key, tat);
        if self.young.len() < half {
            return 0;
        }
        let dropped = std::mem::replace(&mut self.old, std::mem::take(&mut self.young));
        dropped.values().filter(|t| **t > now).count() as u64
    }

    fn remove(&mut self, key: u64) {
        self.young.remove(&key);
        self.old.remove(&key);
    }
}

pub struct LocalLimiter {
    shards: Box<[Mutex<Shard>]>,
    /// Keys per generation of one shard.
    half: usize,
    keys: RandomState,
    epoch: Instant,
    evicted: AtomicU64,
}

impl LocalLimiter {
    /// A limiter holding at most `max_keys` live buckets (rounded up to a multiple of 64).
    pub fn new(max_keys: usize) -> Arc<Self> {
        Arc::new(Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            half: max_keys.div_ceil(SHARDS).div_ceil(2).max(1),
            keys: RandomState::new(),
            epoch: Instant::now(),
            evicted: AtomicU64::new(0),
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

    /// Live buckets forgotten because the table was full.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    pub fn sweep(&self, now: u64) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let Shard { young, old } = &mut *shard;
            for map in [young, old] {
                map.retain(|_, tat| *tat > now);
                if map.capacity() > 4 * map.len().max(64) {
                    map.shrink_to_fit();
                }
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

    fn shard(&self, key: u64) -> &Mutex<Shard> {
        &self.shards[(key >> 58) as usize % SHARDS]
    }

    /// Charges one request; returns the emission interval charged.
    fn charge(&self, key: u64, check: &Check<'_>, now: u64) -> Result<u64, Limited> {
        let t = check.rate.emission_interval().as_nanos() as u64;
        let tau = t.saturating_mul(check.rate.burst);
        let shard = self.shard(key).lock();
        let tat = shard.get(key).unwrap_or(now).max(now);
        let next = tat.saturating_add(t);
        if next - now > tau {
            let retry = next - now - tau;
            // Refused is used too: the bucket moves to the young generation, so a flood of
            // new keys cannot make the table forget a limited client.
            self.store(shard, key, tat, now);
            return Err(Limited {
                label: check.label(),
                rate: Some(check.rate),
                retry_after: Duration::from_nanos(retry),
                reset: Duration::from_nanos(tat - now),
            });
        }
        self.store(shard, key, next, now);
        Ok(t)
    }

    /// Stores a bucket in its locked shard; counts the live buckets that made way for it.
    fn store(&self, mut shard: parking_lot::MutexGuard<'_, Shard>, key: u64, tat: u64, now: u64) {
        let forgotten = shard.put(key, tat, self.half, now);
        drop(shard);
        if forgotten > 0 {
            self.evicted.fetch_add(forgotten, Ordering::Relaxed);
        }
    }

    /// Takes back a charge (another bucket of the same request refused).
    fn refund(&self, key: u64, t: u64, now: u64) {
        let mut shard = self.shard(key).lock();
        if let Some(tat) = shard.get(key) {
            let back = tat.saturating_sub(t);
            if back <= now {
                shard.remove(key);
            } else {
                shard.put(key, back, usize::MAX, now);
            }
        }
    }
}

#[async_trait]
impl RateLimiter for LocalLimiter {
    async fn acquire(&self, checks: &[Check<'_>]) -> Result<(), Limited> {
        self.acquire_at(checks, self.now())
    }

    fn evicted(&self) -> u64 {
        LocalLimiter::evicted(self)
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
    fn a_flood_of_new_keys_never_refuses_a_new_key_and_stays_bounded() {
        let l = LocalLimiter::new(640);
        let names: Vec<String> = (0..5000).map(|i| format!("spoof-{i}")).collect();
        let passed = names
            .iter()
            .filter(|n| l.acquire_at(&[user(n, "1/h")], SEC).is_ok())
            .count();
        assert_eq!(passed, 5000, "every new key is charged, none refused");
        assert!(l.len() <= 640, "{} keys kept", l.len());
        assert!(l.evicted() >= 5000 - 640, "{} evicted", l.evicted());
        // Once their TATs pass, the keys are dropped.
        l.sweep(3 * 3600 * SEC);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn a_key_charged_often_survives_any_flood() {
        let l = LocalLimiter::new(640);
        let alice = user("alice", "1/h");
        assert!(l.acquire_at(&[alice], SEC).is_ok());
        for i in 0..50_000 {
            let name = format!("spoof-{i}");
            assert!(l.acquire_at(&[user(&name, "1/h")], SEC).is_ok());
            if i % 8 == 0 {
                assert!(
                    l.acquire_at(&[alice], SEC).is_err(),
                    "alice's bucket was forgotten after {i} new keys"
                );
            }
        }
    }
}
