//! Which user fires shot number `i`, with which quantity and key.
//!
//! Shots are a pure function of their index and the seed: no shared RNG, no pre-built list,
//! so a run can simulate a billion distinct users in constant memory, every worker computes
//! its shot without contention, and the same seed replays the same sale.

use std::sync::Arc;

use super::opts::{Pick, QtyRange};
use super::scenario::Plan;

/// One planned claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    pub user: String,
    pub qty: u64,
    /// Idempotency-Key; the clicks of one user share it.
    pub key: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Shots {
    /// A fixed list instead (`seckill demo`, the tests): shot `i` is `list[i]`.
    list: Option<Arc<[Shot]>>,
    users: u64,
    pick: Pick,
    clicks: u64,
    qty: QtyRange,
    idempotency: bool,
    seed: u64,
}

/// SplitMix64: a fast, well-mixed hash of one word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Shots {
    pub fn new(plan: &Plan) -> Self {
        Self {
            list: None,
            users: plan.users,
            pick: plan.pick,
            clicks: plan.clicks,
            qty: plan.qty,
            idempotency: plan.idempotency,
            seed: plan.seed,
        }
    }

    /// Exactly these shots, in order; a storm over them must stop after `shots.len()` requests.
    pub fn list(shots: Vec<Shot>) -> Self {
        Self {
            list: Some(shots.into()),
            users: 1,
            pick: Pick::Once,
            clicks: 1,
            qty: QtyRange { min: 1, max: 1 },
            idempotency: false,
            seed: 0,
        }
    }

    /// The user number (1-based) of shot `i`.
    pub fn user_of(&self, i: u64) -> u64 {
        let group = i / self.clicks;
        let slot = match self.pick {
            Pick::Once => group % self.users,
            Pick::Uniform => mix(self.seed ^ mix(group)) % self.users,
        };
        slot + 1
    }

    pub fn get(&self, i: u64) -> Shot {
        if let Some(list) = &self.list {
            return list[i as usize].clone();
        }
        let span = self.qty.max - self.qty.min + 1;
        let qty = self.qty.min + mix(self.seed.rotate_left(17) ^ mix(i)) % span;
        Shot {
            user: format!("u{}", self.user_of(i)),
            qty,
            key: self.idempotency.then(|| format!("k{}", i / self.clicks)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shots(pick: Pick, users: u64, clicks: u64) -> Shots {
        Shots {
            list: None,
            users,
            pick,
            clicks,
            qty: QtyRange { min: 1, max: 2 },
            idempotency: true,
            seed: 7,
        }
    }

    #[test]
    fn once_cycles_through_users_and_clicks_share_a_user_and_key() {
        let s = shots(Pick::Once, 3, 2);
        let users: Vec<u64> = (0..8).map(|i| s.user_of(i)).collect();
        assert_eq!(users, vec![1, 1, 2, 2, 3, 3, 1, 1]);
        assert_eq!(s.get(0).key, s.get(1).key);
        assert_ne!(s.get(1).key, s.get(2).key);
    }

    #[test]
    fn uniform_stays_in_range_and_is_reproducible() {
        let s = shots(Pick::Uniform, 10, 1);
        let mut seen = [0u32; 11];
        for i in 0..10_000 {
            let u = s.user_of(i);
            assert!((1..=10).contains(&u));
            seen[u as usize] += 1;
            assert!((1..=2).contains(&s.get(i).qty));
        }
        assert!(
            seen[1..].iter().all(|&n| n > 800),
            "roughly uniform: {seen:?}"
        );
        assert_eq!(s.get(123), s.get(123));
    }
}
