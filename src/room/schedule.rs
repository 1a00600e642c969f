//! The admission schedule both deployments follow: the same arithmetic in Rust (embedded) and
//! in `lua/join.lua` (Redis), so a room answers alike in either.
//!
//! Admissions are spaced `spacing` µs apart (1 s ÷ `admit_per_second`, rounded up), so no
//! window of a second ever admits more than `admit_per_second`. The pre-queue (everyone who
//! joined before `starts_at`) is frozen at `starts_at` and ranked by its shuffle score; rank r
//! is admitted at `starts_at + (r − 1) · spacing`. A later joiner gets the next free slot: one
//! spacing after the last slot given, or the moment it joins if the line is empty then. So each
//! user's admission time is fixed when it gets its place, and a status read is arithmetic.

/// A user's place, as a store found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Joined before `starts_at`, which has not come yet.
    Prequeue,
    /// Admitted at `admit_at` (µs); `ahead` users before it are not admitted yet at `now`.
    Line { admit_at: i64, ahead: u64, now: i64 },
    /// Not admitted, and the campaign sells nothing more.
    SoldOut,
}

/// When pre-queue rank `rank` (from 1) is admitted.
pub fn pre_slot(starts: i64, rank: u64, spacing: i64) -> i64 {
    starts + (rank as i64 - 1) * spacing
}

/// How many of a pre-queue of `q` are admitted at `now`.
pub fn pre_admitted(starts: Option<i64>, q: u64, now: i64, spacing: i64) -> u64 {
    match starts {
        Some(s) if now >= s => q.min(((now - s) / spacing) as u64 + 1),
        _ => 0,
    }
}

/// The slot of a user joining at `now` behind the last slot given, `tail`.
pub fn next_slot(now: i64, tail: Option<i64>, spacing: i64) -> i64 {
    tail.map_or(now, |t| now.max(t + spacing))
}

/// The last slot of a frozen pre-queue of `q`.
pub fn pre_tail(starts: Option<i64>, q: u64, spacing: i64) -> Option<i64> {
    match starts {
        Some(s) if q > 0 => Some(pre_slot(s, q, spacing)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_pre_queue_is_admitted_one_spacing_apart_from_the_start() {
        assert_eq!(pre_slot(1_000, 1, 10), 1_000);
        assert_eq!(pre_slot(1_000, 3, 10), 1_020);
        assert_eq!(pre_admitted(Some(1_000), 5, 999, 10), 0);
        assert_eq!(pre_admitted(Some(1_000), 5, 1_000, 10), 1);
        assert_eq!(pre_admitted(Some(1_000), 5, 1_019, 10), 2);
        assert_eq!(pre_admitted(Some(1_000), 5, 9_999, 10), 5);
        assert_eq!(pre_admitted(None, 5, 9_999, 10), 0);
        assert_eq!(pre_tail(Some(1_000), 5, 10), Some(1_040));
        assert_eq!(next_slot(2_000, Some(1_040), 10), 2_000);
        assert_eq!(next_slot(1_000, Some(1_040), 10), 1_050);
        assert_eq!(next_slot(1_000, None, 10), 1_000);
    }

    proptest! {
        /// Whatever the joins, no two slots are closer than one spacing, and so no second
        /// admits more than the rate.
        #[test]
        fn slots_never_come_closer_than_the_spacing(
            rate in 1u32..2_000,
            q in 0u64..50,
            gaps in proptest::collection::vec(0i64..3_000_000, 1..200),
        ) {
            let spacing = (1_000_000 + i64::from(rate) - 1) / i64::from(rate);
            let starts = 5_000_000;
            let mut slots: Vec<i64> = (1..=q).map(|r| pre_slot(starts, r, spacing)).collect();
            let mut tail = pre_tail(Some(starts), q, spacing);
            let mut now = starts;
            for g in gaps {
                now += g;
                let s = next_slot(now, tail, spacing);
                prop_assert!(s >= now);
                tail = Some(s);
                slots.push(s);
            }
            for w in slots.windows(2) {
                prop_assert!(w[1] - w[0] >= spacing);
            }
            for (i, s) in slots.iter().enumerate() {
                let in_second = slots[i..].iter().take_while(|t| **t < s + 1_000_000).count();
                prop_assert!(in_second as u64 <= u64::from(rate));
            }
        }
    }
}
