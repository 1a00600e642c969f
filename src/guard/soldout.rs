//! The stock board: each instance's picture of every campaign's stock, for the sold-out fast
//! path and the admission gate.
//!
//! Once a campaign is sold out, nearly every claim of a flash sale can only lose. The board lets
//! the guard answer those `sold_out` from memory, without touching the engine (its lock, or
//! Redis). It must never under-sell, so the board is written only by the authority:
//!
//! - **embedded**: the engine publishes the campaign's remaining stock and status under the
//!   campaign lock after every change — a claim, a failed commit giving units back, a restock,
//!   a cancel, a status change — *before* that operation answers. A restock or cancel therefore
//!   reopens the campaign before its own answer is sent: the stale interval is zero.
//! - **scale-out** (contract for the Redis implementation): every claim script returns the
//!   remaining stock, which the instance publishes; every restock/cancel script bumps a
//!   per-campaign stock epoch and the instance that ran it `PUBLISH`es `{id, remaining, epoch}`;
//!   each instance subscribes and publishes what it hears. Pub/sub can drop messages, so each
//!   instance also re-reads `remaining`/epoch of every campaign it believes sold out at least
//!   every `max_staleness` (one read per campaign per interval, not per request). A stale
//!   `sold_out` then outlives a restock by at most `max_staleness` plus one round trip.
//!
//! The fast path keeps the engine's order of outcomes exactly: it answers only when the
//! engine would answer `sold_out` too — campaign active, inside its window, remaining 0, `qty`
//! within the per-user limit, and the user not among those who ever won (a holder must hear
//! `already_claimed`). Claims with an `Idempotency-Key` always go to the engine, which keeps
//! their first answer.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use parking_lot::RwLock;

use crate::telemetry::claims::CampaignSeries;
use crate::telemetry::Registry;

/// Top bit of the packed state: the campaign is `active`.
const SELLING: u64 = 1 << 63;

/// The holder set's keys are already keyed SipHash outputs: hashing them again only costs time
/// (a million holders are inserted at every restart).
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// What does not change during a campaign's life and the fast path needs.
#[derive(Debug, Clone)]
pub struct StockFacts {
    pub per_user_limit: u64,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
}

/// Per-campaign counters, exposed by `GET /metrics`.
#[derive(Debug, Default)]
pub struct CampaignCounters {
    /// Claims handed to the engine (embedded) or to Redis (scale-out).
    pub engine_claims: AtomicU64,
    /// Claims answered `sold_out` by the fast path.
    pub fast_sold_out: AtomicU64,
    /// Claims refused by the admission gate.
    pub admission_refused: AtomicU64,
}

/// `hashes` in the order of the buckets they land in, in a hashbrown table with room for
/// `capacity` (a table of `2^b` buckets puts a hash at bucket `hash & (2^b - 1)`), by one
/// counting sort on the top bits of that index: near enough to front to back that every
/// insert touches memory the previous ones just did.
fn bucket_order(hashes: Vec<u64>, capacity: usize) -> Vec<u64> {
    /// Runs the sort makes: few enough that each run's next slot stays in the cache.
    const RUNS_LOG2: u32 = 12;
    let buckets = (capacity.saturating_mul(8) / 7).max(1).next_power_of_two();
    let bits = buckets.trailing_zeros();
    if bits <= RUNS_LOG2 + 4 {
        return hashes; // a table this small fits in the cache already
    }
    let mask = (buckets - 1) as u64;
    let run = |h: u64| ((h & mask) >> (bits - RUNS_LOG2)) as usize;
    let mut starts = vec![0usize; (1 << RUNS_LOG2) + 1];
    for &h in &hashes {
        starts[run(h) + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut out = vec![0u64; hashes.len()];
    for h in hashes {
        let at = &mut starts[run(h)];
        out[*at] = h;
        *at += 1;
    }
    out
}

/// One campaign on the board.
#[derive(Debug)]
pub struct StockEntry {
    /// `remaining | SELLING` in one word, so a reader never sees a torn pair.
    state: AtomicU64,
    facts: StockFacts,
    /// Hashes of every user who won in this campaign (never shrinks; a stale entry only costs
    /// an engine call).
    holders: RwLock<HashSet<u64, BuildHasherDefault<Prehashed>>>,
    users: RandomState,
    /// Claims of this campaign now inside the engine (admission gate).
    pub(crate) in_flight: AtomicU64,
    pub counters: CampaignCounters,
    id: Box<str>,
    /// This campaign's claim counters, bound on first use to the registry of the instance
    /// that serves the board (one per board).
    series: OnceLock<Arc<CampaignSeries>>,
}

impl StockEntry {
    /// The campaign's claim series in `registry` (registered on first call).
    pub fn series(&self, registry: &Registry) -> &Arc<CampaignSeries> {
        self.series.get_or_init(|| registry.campaign(&self.id))
    }

    /// The authority's view after a change. Call [`Self::add_holder`] for a winner *before*
    /// publishing the stock its win left.
    pub fn publish(&self, remaining: u64, selling: bool) {
        let word = remaining.min(!SELLING) | if selling { SELLING } else { 0 };
        self.state.store(word, Ordering::SeqCst);
    }

    pub fn add_holder(&self, user: &str) {
        let h = self.users.hash_one(user);
        if !self.holders.read().contains(&h) {
            self.holders.write().insert(h);
        }
    }

    /// [`Self::add_holder`] for `count` users under one lock (recovery). The hashes are put
    /// in the order of the set's buckets first, so filling a set of millions walks its memory
    /// front to back: inserted as they come, each one is a cache and TLB miss once the set
    /// outgrows the cache, which made a 10 M-buyer restart superlinear.
    pub fn add_holders<'a>(&self, users: impl Iterator<Item = &'a str>, count: usize) {
        let mut hashes = Vec::with_capacity(count);
        hashes.extend(users.map(|u| self.users.hash_one(u)));
        let mut holders = self.holders.write();
        holders.reserve(hashes.len());
        let hashes = bucket_order(hashes, holders.capacity());
        holders.extend(hashes);
    }

    /// Users recorded as holders.
    pub fn holder_count(&self) -> usize {
        self.holders.read().len()
    }

    /// Published as active with nothing left: the fast path is on.
    pub fn is_sold_out(&self) -> bool {
        self.state.load(Ordering::SeqCst) == SELLING
    }

    /// Remaining stock as last published.
    pub fn remaining(&self) -> u64 {
        self.state.load(Ordering::SeqCst) & !SELLING
    }

    /// Whether the engine would answer this claim `sold_out` (see the module docs).
    pub fn sold_out_for(&self, user: &str, qty: u64, now: DateTime<Utc>) -> bool {
        if self.state.load(Ordering::SeqCst) != SELLING {
            return false; // stock left, or not active
        }
        let f = &self.facts;
        if qty > f.per_user_limit
            || f.starts_at.is_some_and(|s| now < s)
            || f.ends_at.is_some_and(|e| now >= e)
        {
            return false;
        }
        !self.holders.read().contains(&self.users.hash_one(user))
    }
}

/// Every campaign's entry. Entries exist only for campaigns the authority registered, so the
/// board's size is bounded by the number of campaigns, not by what clients send.
#[derive(Debug, Default)]
pub struct StockBoard {
    entries: RwLock<HashMap<String, Arc<StockEntry>>>,
    users: RandomState,
    /// Every campaign that exists is registered here (the embedded deployment's own board);
    /// a scale-out board learns of campaigns other instances create late.
    complete: std::sync::atomic::AtomicBool,
    /// Where the board is not complete: every campaign id as last read from the ledger
    /// (`None` until first read).
    known: RwLock<Option<HashSet<String>>>,
}

impl StockBoard {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds a campaign (creation or recovery); it starts closed to the fast path until its
    /// first [`StockEntry::publish`].
    pub fn register(&self, id: &str, facts: StockFacts) -> Arc<StockEntry> {
        let entry = Arc::new(StockEntry {
            state: AtomicU64::new(0),
            facts,
            holders: RwLock::new(HashSet::default()),
            users: self.users.clone(),
            in_flight: AtomicU64::new(0),
            counters: CampaignCounters::default(),
            id: id.into(),
            series: OnceLock::new(),
        });
        self.entries.write().insert(id.to_owned(), entry.clone());
        entry
    }

    /// Declares that every campaign that exists is registered (see [`Self::may_exist`]).
    pub fn mark_complete(&self) {
        self.complete.store(true, Ordering::SeqCst);
    }

    /// Replaces the ids of every campaign known to exist (a re-read of the ledger).
    pub fn set_known(&self, ids: Vec<String>) {
        *self.known.write() = Some(ids.into_iter().collect());
    }

    /// Adds a campaign just created through this instance (before the next re-read).
    pub fn add_known(&self, id: &str) {
        if let Some(k) = self.known.write().as_mut() {
            k.insert(id.to_owned());
        }
    }

    /// False when the campaign does not exist as far as this instance knows: the board is
    /// complete and does not hold it, or the last read of every campaign id did not list it
    /// (a campaign another instance created within the last re-read only goes without per-user
    /// buckets that long). Per-user rate buckets are charged only for campaigns that may exist,
    /// so made-up campaign ids cannot fill the rate-limit table (or Redis).
    pub fn may_exist(&self, id: &str, entry: Option<&Arc<StockEntry>>) -> bool {
        if entry.is_some() {
            return true;
        }
        if self.complete.load(Ordering::SeqCst) {
            return false;
        }
        self.known.read().as_ref().is_none_or(|k| k.contains(id))
    }

    pub fn get(&self, id: &str) -> Option<Arc<StockEntry>> {
        self.entries.read().get(id).cloned()
    }

    /// (id, entry) of every campaign, sorted by id.
    /// The ids of the campaigns on the board, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.all().into_iter().map(|(id, _)| id).collect()
    }

    pub fn all(&self) -> Vec<(String, Arc<StockEntry>)> {
        let mut v: Vec<_> = self
            .entries
            .read()
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(limit: u64) -> Arc<StockEntry> {
        let facts = StockFacts {
            per_user_limit: limit,
            starts_at: None,
            ends_at: None,
        };
        StockBoard::new().register("c", facts)
    }

    #[test]
    fn answers_only_what_the_engine_would() {
        let e = entry(2);
        let now = Utc::now();
        assert!(!e.sold_out_for("u1", 1, now), "unpublished");
        e.publish(3, true);
        assert!(!e.sold_out_for("u1", 1, now), "stock left");
        e.add_holder("winner");
        e.publish(0, true);
        assert!(e.sold_out_for("u1", 1, now));
        assert!(e.sold_out_for("u1", 2, now));
        assert!(!e.sold_out_for("u1", 3, now), "over_limit comes first");
        assert!(
            !e.sold_out_for("winner", 1, now),
            "already_claimed comes first"
        );
        e.publish(0, false);
        assert!(!e.sold_out_for("u1", 1, now), "paused comes first");
        e.publish(1, true);
        assert!(!e.sold_out_for("u1", 1, now), "restocked");
        assert_eq!(e.remaining(), 1);
    }

    #[test]
    fn bucket_order_keeps_every_hash_and_orders_them_by_bucket() {
        let hashes: Vec<u64> = (0..200_000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let capacity = 200_000;
        let ordered = bucket_order(hashes.clone(), capacity);
        let mut a = hashes;
        let mut b = ordered.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "the same hashes");
        let mask = ((capacity * 8 / 7).next_power_of_two() - 1) as u64;
        let top = |h: &u64| (h & mask) >> (mask.count_ones() - 12);
        assert!(ordered.windows(2).all(|w| top(&w[0]) <= top(&w[1])));
        let e = entry(1);
        e.add_holders(["a", "b", "a"].into_iter(), 3);
        assert_eq!(e.holder_count(), 2);
    }

    #[test]
    fn window_comes_first() {
        let now = Utc::now();
        let e = StockBoard::new().register(
            "c",
            StockFacts {
                per_user_limit: 1,
                starts_at: None,
                ends_at: Some(now),
            },
        );
        e.publish(0, true);
        assert!(!e.sold_out_for("u1", 1, now), "ended comes first");
        assert!(e.sold_out_for("u1", 1, now - chrono::Duration::seconds(1)));
    }
}
