//! Units held per user in one campaign, stored compactly.
//!
//! A campaign that sold a million units to a million buyers keeps a million entries for its
//! whole life, and rebuilds them at every restart. A `HashMap<String, u64>` costs a 32-byte
//! bucket plus a separate heap allocation per user (about 100 bytes a buyer once the table's
//! spare capacity is counted). Here every user id is copied once into one append-only byte
//! arena, prefixed by its length, and the table holds 8-byte slots: the id's offset in the
//! arena and the units held. That is about 27 bytes a buyer at a million buyers (measured in
//! docs/BENCHMARKS.md) and no allocation per user.
//!
//! A user whose holding drops to zero keeps its slot (held = 0) and its bytes in the arena, so
//! a buyer who cancels and buys again is not stored twice; the table therefore grows with the
//! distinct users who ever held units since the process started, as the guard's holder set
//! already does. Offsets and holdings are 32-bit; an arena past 4 GiB or a holding past
//! `u32::MAX` (neither reachable within the API's limits) moves that user to a plain map, so
//! nothing is ever truncated.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

#[derive(Clone, Copy)]
struct Slot {
    /// Offset of the id's length byte in the arena.
    at: u32,
    held: u32,
}

#[derive(Default)]
pub struct Holdings {
    table: HashTable<Slot>,
    /// `len, bytes…` of every id in `table`.
    arena: Vec<u8>,
    /// Users that do not fit a slot (see the module docs).
    spill: HashMap<Box<str>, u64>,
    hasher: RandomState,
}

fn id_at(arena: &[u8], at: u32) -> &[u8] {
    let at = at as usize;
    let len = arena[at] as usize;
    &arena[at + 1..at + 1 + len]
}

impl Holdings {
    /// Room for `users` holders without growing (a rebuild knows about how many to expect).
    pub fn reserve(&mut self, users: usize) {
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.table
            .reserve(users, |s| hasher.hash_one(id_at(arena, s.at)));
    }

    /// Gives back what a generous [`Self::reserve`] did not use.
    pub fn shrink_to_fit(&mut self) {
        let (arena, hasher) = (&self.arena, &self.hasher);
        self.table
            .shrink_to_fit(|s| hasher.hash_one(id_at(arena, s.at)));
        self.arena.shrink_to_fit();
    }

    fn find(&self, user: &str) -> Option<&Slot> {
        let hash = self.hasher.hash_one(user.as_bytes());
        let arena = &self.arena;
        self.table
            .find(hash, |s| id_at(arena, s.at) == user.as_bytes())
    }

    /// Units `user` holds now.
    pub fn get(&self, user: &str) -> u64 {
        match self.find(user) {
            Some(s) => u64::from(s.held),
            None => self.spill.get(user).copied().unwrap_or(0),
        }
    }

    /// Adds `qty` units to what `user` holds.
    pub fn add(&mut self, user: &str, qty: u64) {
        let hash = self.hasher.hash_one(user.as_bytes());
        let (arena, hasher) = (&self.arena, &self.hasher);
        let found = self
            .table
            .find_entry(hash, |s| id_at(arena, s.at) == user.as_bytes());
        if let Ok(mut entry) = found {
            let sum = u64::from(entry.get().held) + qty;
            match u32::try_from(sum) {
                Ok(held) => entry.get_mut().held = held,
                Err(_) => {
                    entry.remove();
                    self.spill.insert(user.into(), sum);
                }
            }
            return;
        }
        if let Some(held) = self.spill.get_mut(user) {
            *held += qty;
            return;
        }
        let at = u32::try_from(self.arena.len()).ok();
        let (Some(at), Ok(held), Ok(len)) = (at, u32::try_from(qty), u8::try_from(user.len()))
        else {
            self.spill.insert(user.into(), qty);
            return;
        };
        if self.arena.len() + 1 + user.len() > u32::MAX as usize {
            self.spill.insert(user.into(), qty);
            return;
        }
        self.arena.push(len);
        self.arena.extend_from_slice(user.as_bytes());
        let arena = &self.arena;
        self.table.insert_unique(hash, Slot { at, held }, |s| {
            hasher.hash_one(id_at(arena, s.at))
        });
    }

    /// Takes `qty` units from what `user` holds (never below zero).
    pub fn sub(&mut self, user: &str, qty: u64) {
        let hash = self.hasher.hash_one(user.as_bytes());
        let arena = &self.arena;
        if let Ok(mut entry) = self
            .table
            .find_entry(hash, |s| id_at(arena, s.at) == user.as_bytes())
        {
            let held = &mut entry.get_mut().held;
            *held = held.saturating_sub(u32::try_from(qty).unwrap_or(u32::MAX));
        } else if let Some(held) = self.spill.get_mut(user) {
            *held = held.saturating_sub(qty);
            if *held == 0 {
                self.spill.remove(user);
            }
        }
    }

    /// Every user holding at least one unit, with how many.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        let arena = &self.arena;
        let slots = self.table.iter().filter(|s| s.held > 0).map(move |s| {
            let id = std::str::from_utf8(id_at(arena, s.at)).expect("ids are stored from &str");
            (id, u64::from(s.held))
        });
        slots.chain(self.spill.iter().map(|(u, h)| (&**u, *h)))
    }

    /// Users holding at least one unit (counted from the slots alone: no id is read).
    pub fn holders(&self) -> usize {
        self.table.iter().filter(|s| s.held > 0).count() + self.spill.len()
    }

    /// Every user who held units since this was built (one whose holding fell back to zero
    /// too), read front to back from the arena: at ten million users a walk of the table
    /// would read each id at a random place, one cache miss apiece.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        let arena = &self.arena;
        let mut at = 0;
        let stored = std::iter::from_fn(move || {
            let len = *arena.get(at)? as usize;
            let id = arena.get(at + 1..at + 1 + len)?;
            at += 1 + len;
            Some(std::str::from_utf8(id).expect("ids are stored from &str"))
        });
        stored.chain(self.spill.keys().map(|u| &**u))
    }
}

/// Equal when the same users hold the same units (slots of zero and layout do not count).
impl PartialEq for Holdings {
    fn eq(&self, other: &Self) -> bool {
        self.holders() == other.holders() && self.iter().all(|(u, h)| other.get(u) == h)
    }
}

impl std::fmt::Debug for Holdings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_subtracts_and_iterates_like_a_map() {
        let mut h = Holdings::default();
        let mut m: HashMap<String, u64> = HashMap::new();
        for i in 0..5_000u64 {
            let user = format!("u{}", i % 1_700);
            h.add(&user, 1 + i % 3);
            *m.entry(user).or_default() += 1 + i % 3;
            if i % 7 == 0 {
                let user = format!("u{}", i % 900);
                h.sub(&user, 2);
                if let Some(v) = m.get_mut(&user) {
                    *v = v.saturating_sub(2);
                }
            }
        }
        m.retain(|_, v| *v > 0);
        assert_eq!(h.holders(), m.len());
        for (u, v) in &m {
            assert_eq!(h.get(u), *v, "{u}");
        }
        let listed: HashMap<String, u64> = h.iter().map(|(u, v)| (u.to_owned(), v)).collect();
        assert_eq!(listed, m);
        let ids: std::collections::HashSet<&str> = h.ids().collect();
        assert!(
            m.keys().all(|u| ids.contains(u.as_str())),
            "every holder listed"
        );
        assert!(ids.len() <= 1_700, "nobody else");
        assert_eq!(h.get("nobody"), 0);
    }

    #[test]
    fn a_holding_beyond_32_bits_moves_to_the_spill_exactly() {
        let mut h = Holdings::default();
        h.add("big", u64::from(u32::MAX));
        h.add("big", 5);
        h.add("small", 1);
        assert_eq!(h.get("big"), u64::from(u32::MAX) + 5);
        h.sub("big", u64::from(u32::MAX) + 5);
        assert_eq!(h.get("big"), 0);
        h.add("big", 2);
        assert_eq!(h.get("big"), 2);
        assert_eq!(h.holders(), 2);
        let long = "界".repeat(100); // 300 bytes: longer than a length byte holds
        h.add(&long, 3);
        assert_eq!(h.get(&long), 3);
        assert_eq!(h.holders(), 3);
    }

    #[test]
    fn a_release_to_zero_keeps_the_slot_and_equality_ignores_it() {
        let mut a = Holdings::default();
        let mut b = Holdings::default();
        a.add("u1", 1);
        a.add("u2", 2);
        a.sub("u1", 1);
        b.add("u2", 2);
        assert_eq!(a, b);
        a.add("u1", 1);
        assert_ne!(a, b);
        assert_eq!(a.get("u1"), 1);
        assert_eq!(a.arena.len(), 6, "u1 stored once");
    }
}
