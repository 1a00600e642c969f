//! The pending orders of a campaign with holds, and their deadlines.
//!
//! A won order of such a campaign keeps its units, codes and allowance while it waits for a
//! confirm until `pay_by`. Exactly one resolution may take it out of here — a confirm before
//! the deadline, the expiry at or after it, or a cancel — and whichever does so first under
//! the campaign lock owns it; the others find it gone. Units stay counted in
//! [`Holds::units`] until the resolution is durable and settled, so `remaining + pending`
//! never double counts a unit in flight. Deadlines sit in a `BTreeSet` ordered by time: the
//! sweeper only ever looks at its front.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

/// One pending order: what its resolution gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub pay_by: DateTime<Utc>,
    pub user_id: String,
    pub qty: u64,
    pub codes: Vec<String>,
}

/// The pending entry of a won reservation.
pub(super) fn held(r: &super::Reservation, pay_by: DateTime<Utc>) -> Held {
    Held {
        pay_by,
        user_id: r.user_id.clone(),
        qty: r.qty,
        codes: r.codes.clone(),
    }
}

/// Why a pending order could not be taken for a confirm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotConfirmable {
    /// Not pending here: resolved already (the ledger knows how) or never a hold.
    NotPending,
    /// Its `pay_by` has passed; the deadline decides, whether or not it is expired yet.
    Overdue,
}

#[derive(Debug, Default)]
pub struct Holds {
    pending: HashMap<u64, Held>,
    deadlines: BTreeSet<(DateTime<Utc>, u64)>,
    /// Units of pending orders, including those taken for a resolution not yet settled.
    units: u64,
}

impl Holds {
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Pending orders not taken by a resolution.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Every pending order not taken by a resolution, by order number (to install them in
    /// another gate).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Held)> {
        self.pending.iter().map(|(seq, h)| (*seq, h))
    }

    /// The earliest deadline, if any order is pending.
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// A new pending order (won, or recovered from the ledger).
    pub fn add(&mut self, seq: u64, held: Held) {
        self.units += held.qty;
        self.deadlines.insert((held.pay_by, seq));
        if let Some(old) = self.pending.insert(seq, held) {
            // An order number is issued once; never reached, kept exact anyway.
            self.deadlines.remove(&(old.pay_by, seq));
            self.units -= old.qty;
        }
    }

    /// Takes order `seq` out for a resolution that owns it (cancel, a failed claim commit).
    pub fn take(&mut self, seq: u64) -> Option<Held> {
        let held = self.pending.remove(&seq)?;
        self.deadlines.remove(&(held.pay_by, seq));
        Some(held)
    }

    /// Takes order `seq` out for a confirm decided at `now`.
    pub fn take_for_confirm(
        &mut self,
        seq: u64,
        now: DateTime<Utc>,
    ) -> Result<Held, NotConfirmable> {
        let held = self.pending.get(&seq).ok_or(NotConfirmable::NotPending)?;
        if now >= held.pay_by {
            return Err(NotConfirmable::Overdue);
        }
        Ok(self.take(seq).expect("present"))
    }

    /// Takes out every order whose `pay_by` is at or before `now`, at most `max`, earliest
    /// first.
    pub fn take_due(&mut self, now: DateTime<Utc>, max: usize) -> Vec<(u64, Held)> {
        let mut due = Vec::new();
        while due.len() < max {
            match self.deadlines.first() {
                Some(&(t, seq)) if t <= now => {
                    self.deadlines.pop_first();
                    let held = self.pending.remove(&seq).expect("a deadline has its order");
                    due.push((seq, held));
                }
                _ => break,
            }
        }
        due
    }

    /// A taken order's resolution is durable: its units are no longer pending.
    pub fn settled(&mut self, qty: u64) {
        self.units = self.units.saturating_sub(qty);
    }

    /// A taken order's resolution was not written: it is pending again.
    pub fn put_back(&mut self, seq: u64, held: Held) {
        self.units -= held.qty;
        self.add(seq, held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(secs: i64, qty: u64) -> Held {
        Held {
            pay_by: DateTime::from_timestamp(1_000 + secs, 0).unwrap(),
            user_id: format!("u{secs}"),
            qty,
            codes: vec![],
        }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_000 + secs, 0).unwrap()
    }

    #[test]
    fn the_deadline_decides_and_each_order_is_taken_once() {
        let mut h = Holds::default();
        h.add(1, held(10, 2));
        h.add(2, held(5, 1));
        h.add(3, held(20, 1));
        assert_eq!(h.units(), 4);
        assert_eq!(h.next_deadline(), Some(at(5)));
        // At the instant of pay_by the confirm is refused; just before, it wins.
        assert_eq!(h.take_for_confirm(2, at(5)), Err(NotConfirmable::Overdue));
        assert!(h.take_for_confirm(1, at(9)).is_ok());
        assert_eq!(
            h.take_for_confirm(1, at(9)),
            Err(NotConfirmable::NotPending)
        );
        h.settled(2);
        // Expiry takes what is due, earliest first, and nothing taken already.
        let due: Vec<u64> = h.take_due(at(10), 10).into_iter().map(|(s, _)| s).collect();
        assert_eq!(due, vec![2]);
        assert_eq!(h.take_due(at(10), 10), vec![]);
        assert_eq!(h.units(), 2, "taken but not settled still counts");
        h.put_back(2, held(5, 1));
        assert_eq!(h.take_due(at(30), 1).len(), 1, "at most max");
        assert_eq!(h.take_due(at(30), 5).len(), 1);
        assert!(h.is_empty());
    }
}
