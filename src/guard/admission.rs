//! The admission gate: at most k × remaining claims of a campaign inside the engine at once.
//!
//! With 1,000 units and 100,000 clients, at most 1,000 claims can win; letting all 100,000
//! queue on the campaign's lock (or on Redis) only makes every one of them slow. The gate lets
//! `k × remaining` in — enough to sell every unit even if some admitted claims lose
//! (`already_claimed`, `over_limit`, failed commits) — and refuses the rest at once with 503
//! `overloaded` and `Retry-After`, so clients come back when stock may still be there.
//!
//! When remaining is 0 the `sold_out` answers come from the fast path (see
//! [`super::soldout`]); the claims the fast path must not answer (holders, keyed retries,
//! paused campaigns) still get `k` slots, so they are answered exactly, never starved and never
//! queued without bound. The gate never answers `sold_out` itself: only the engine's picture
//! decides that outcome.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::soldout::StockEntry;

/// A claim's place inside the engine; dropping it frees the place.
#[derive(Debug)]
pub struct Admitted(Arc<StockEntry>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Lets a claim in if fewer than `k × max(remaining, 1)` are inside; `None` means refuse.
pub fn admit(entry: &Arc<StockEntry>, k: u64) -> Option<Admitted> {
    let limit = k.saturating_mul(entry.remaining().max(1));
    let inside = entry.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let permit = Admitted(entry.clone());
    if inside > limit {
        entry
            .counters
            .admission_refused
            .fetch_add(1, Ordering::Relaxed);
        return None; // dropping the permit gives the place back
    }
    Some(permit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::soldout::{StockBoard, StockFacts};

    fn entry(remaining: u64) -> Arc<StockEntry> {
        let e = StockBoard::new().register(
            "c",
            StockFacts {
                per_user_limit: 1,
                starts_at: None,
                ends_at: None,
            },
        );
        e.publish(remaining, true);
        e
    }

    #[test]
    fn k_times_remaining_inside() {
        let e = entry(10);
        let mut held: Vec<_> = (0..20).map(|_| admit(&e, 2).expect("room")).collect();
        assert!(admit(&e, 2).is_none(), "the 21st waits outside");
        held.pop();
        held.push(admit(&e, 2).expect("a freed place is taken again"));
        e.publish(4, true);
        assert!(admit(&e, 2).is_none(), "fewer units, fewer places");
        assert_eq!(e.counters.admission_refused.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn sold_out_still_leaves_k_places() {
        let e = entry(0);
        let a = admit(&e, 3);
        let b = admit(&e, 3);
        let c = admit(&e, 3);
        assert!(a.is_some() && b.is_some() && c.is_some());
        assert!(admit(&e, 3).is_none());
    }

    /// Thousands of threads racing for the gate never get more than the limit in at once.
    #[test]
    fn concurrent_admissions_never_exceed_the_limit() {
        let e = entry(2);
        let max_seen = Arc::new(AtomicMax::default());
        let inside = Arc::new(std::sync::atomic::AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (e, max_seen, inside) = (e.clone(), max_seen.clone(), inside.clone());
                s.spawn(move || {
                    for _ in 0..5000 {
                        if let Some(p) = admit(&e, 2) {
                            max_seen.observe(inside.fetch_add(1, Ordering::SeqCst) + 1);
                            std::thread::yield_now();
                            inside.fetch_sub(1, Ordering::SeqCst);
                            drop(p);
                        }
                    }
                });
            }
        });
        let max = max_seen.0.load(Ordering::SeqCst);
        assert!((1..=4).contains(&max), "{max} inside at once");
        assert_eq!(
            e.in_flight.load(Ordering::SeqCst),
            0,
            "every place given back"
        );
    }

    #[derive(Default)]
    struct AtomicMax(std::sync::atomic::AtomicU64);

    impl AtomicMax {
        fn observe(&self, v: u64) {
            self.0.fetch_max(v, Ordering::SeqCst);
        }
    }
}
