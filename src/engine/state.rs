//! The in-memory state of one campaign and the single atomic step of a claim.
//!
//! `CampaignState` is a plain struct with no locking and no I/O. The embedded backend wraps
//! each campaign's state in its own mutex, so the whole check-and-take of a claim happens under
//! one short critical section and campaigns never wait for each other. Keeping the rules here,
//! pure and synchronous, lets them be tested exhaustively and mirrored line by line in the Redis
//! Lua script.

use std::collections::{HashSet, VecDeque};

use chrono::{DateTime, Utc};

use crate::domain::{CampaignView, ClaimAnswer, HoldsView, Kind, OrderState, Outcome, Status};

pub use self::holdings::Holdings;
pub use self::holds::{Held, Holds, NotConfirmable};
pub use crate::domain::CampaignDef;

/// Units taken from a campaign by a winning claim, not yet confirmed durable.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub order_id: String,
    pub seq: u64,
    pub user_id: String,
    pub qty: u64,
    pub codes: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// Campaigns with holds: the order is pending until this deadline.
    pub pay_by: Option<DateTime<Utc>>,
}

impl Reservation {
    pub fn answer(&self, kind: Kind) -> ClaimAnswer {
        ClaimAnswer {
            order_id: Some(self.order_id.clone()),
            qty: Some(self.qty),
            codes: (kind == Kind::Codes).then(|| self.codes.clone()),
            state: self.pay_by.map(|_| OrderState::Pending),
            pay_by: self.pay_by,
            ..ClaimAnswer::bare(Outcome::Won)
        }
    }

    /// The state the order is written in.
    pub fn state(&self) -> OrderState {
        match self.pay_by {
            Some(_) => OrderState::Pending,
            None => OrderState::Active,
        }
    }
}

/// What the atomic step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Rejected(ClaimAnswer),
    Won(Reservation),
    /// A [dormant](CampaignState::dormant) campaign's claim got past its status and window:
    /// its buyers must be loaded before it can be decided. Nothing was changed.
    Dormant,
}

#[derive(Debug)]
pub struct CampaignState {
    pub def: CampaignDef,
    pub total: u64,
    pub remaining: u64,
    pub status: Status,
    held: Holdings,
    /// Codes not held by any active order, handed out front first.
    pool: VecDeque<String>,
    /// Every code the campaign ever had, to refuse a restock that repeats one.
    all_codes: HashSet<String>,
    next_seq: u64,
    /// Pending orders and their deadlines (campaigns with holds only).
    pub holds: Holds,
    /// Buyers, codes and pending orders not in memory (see [`CampaignState::dormant`]).
    dormant: bool,
}

impl CampaignState {
    /// A fresh campaign selling `total` units (stock) or the given codes.
    pub fn new(def: CampaignDef, total: u64, codes: Vec<String>, status: Status) -> Self {
        let all_codes = codes.iter().cloned().collect();
        Self {
            def,
            total,
            remaining: total,
            status,
            held: Holdings::default(),
            pool: codes.into(),
            all_codes,
            next_seq: 1,
            holds: Holds::default(),
            dormant: false,
        }
    }

    /// A campaign known by its definition and counts alone, its buyers and codes left in the
    /// ledger: one that can no longer sell. It answers every claim its status or window
    /// decides, and [`Decision::Dormant`] to any other; its view is exact.
    pub fn dormant(
        def: CampaignDef,
        total: u64,
        status: Status,
        live_units: u64,
        max_seq: u64,
    ) -> Self {
        let mut s = Self::new(def, total, Vec::new(), status);
        s.remaining = total.saturating_sub(live_units);
        s.next_seq = max_seq + 1;
        s.dormant = true;
        s
    }

    /// Whether a campaign of this definition and status can never sell again from `now` on:
    /// closed (for good), or past its `ends_at` (which never changes). The engine decides both
    /// before it reads a buyer's holding, so such a campaign answers every claim without them.
    pub fn stopped_for_good(def: &CampaignDef, status: Status, now: DateTime<Utc>) -> bool {
        def.stopped_for_good(status, now)
    }

    /// Whether this is a [`CampaignState::dormant`] state.
    pub fn is_dormant(&self) -> bool {
        self.dormant
    }

    /// Rebuilds a campaign from the ledger: its definition, every code it ever had, its
    /// active orders as (user, qty, codes) and the highest order seq ever used. The same as
    /// feeding each order to a [`Rebuild`].
    pub fn recover(
        def: CampaignDef,
        total: u64,
        codes: Vec<String>,
        status: Status,
        active: &[(String, u64, Vec<String>)],
        max_seq: u64,
    ) -> Self {
        let mut rebuild = Rebuild::new(def, total, status, max_seq);
        for code in codes {
            rebuild.code(code);
        }
        for (user, qty, codes) in active {
            rebuild.order(user, *qty, codes);
        }
        rebuild.finish()
    }

    /// Every user holding units, with how many (to install the state in another gate).
    pub fn holdings(&self) -> impl Iterator<Item = (&str, u64)> {
        self.held.iter()
    }

    /// Every user who held units since this state was built, in storage order (see
    /// [`Holdings::ids`]): what the stock board needs, read fastest.
    pub fn holder_ids(&self) -> impl Iterator<Item = &str> {
        self.held.ids()
    }

    /// Users holding units.
    pub fn holders(&self) -> usize {
        self.held.holders()
    }

    /// The codes not held by any active order, in hand-out order.
    pub fn pool(&self) -> impl Iterator<Item = &String> {
        self.pool.iter()
    }

    /// The number the next won order gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn held_by(&self, user: &str) -> u64 {
        self.held.get(user)
    }

    /// The atomic step: status → window → allowance → stock → take.
    pub fn decide(&mut self, user: &str, qty: u64, now: DateTime<Utc>) -> Decision {
        let reject = |outcome| Decision::Rejected(ClaimAnswer::bare(outcome));
        match self.status {
            Status::Paused => return reject(Outcome::Paused),
            Status::Closed => return reject(Outcome::Closed),
            Status::Active => {}
        }
        if self.def.starts_at.is_some_and(|s| now < s) {
            return reject(Outcome::NotStarted);
        }
        if self.def.ends_at.is_some_and(|e| now >= e) {
            return reject(Outcome::Ended);
        }
        if self.dormant {
            return Decision::Dormant;
        }
        let held = self.held_by(user);
        let limit = self.def.per_user_limit;
        if held >= limit {
            return Decision::Rejected(ClaimAnswer {
                held: Some(held),
                ..ClaimAnswer::bare(Outcome::AlreadyClaimed)
            });
        }
        if held + qty > limit {
            return Decision::Rejected(ClaimAnswer {
                held: Some(held),
                ..ClaimAnswer::bare(Outcome::OverLimit)
            });
        }
        if self.remaining < qty {
            return Decision::Rejected(ClaimAnswer {
                remaining: Some(self.remaining),
                ..ClaimAnswer::bare(Outcome::SoldOut)
            });
        }
        self.remaining -= qty;
        self.held.add(user, qty);
        let codes = match self.def.kind {
            Kind::Stock => Vec::new(),
            Kind::Codes => self.pool.drain(..qty as usize).collect(),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let pay_by = self
            .def
            .hold_seconds
            .map(|h| now + chrono::TimeDelta::seconds(i64::from(h)));
        let r = Reservation {
            order_id: format!("{}-{seq}", self.def.id),
            seq,
            user_id: user.to_owned(),
            qty,
            codes,
            created_at: now,
            pay_by,
        };
        if let Some(pay_by) = pay_by {
            self.holds.add(seq, holds::held(&r, pay_by));
        }
        Decision::Won(r)
    }

    /// Undoes a won reservation whose order was not written. A pending order that a
    /// resolution already took is left to it: its write fails too and the engine re-reads.
    pub fn undo(&mut self, r: &Reservation) {
        if r.pay_by.is_some() {
            let Some(held) = self.holds.take(r.seq) else {
                return;
            };
            self.holds.settled(held.qty);
        }
        self.release(&r.user_id, r.qty, &r.codes);
    }

    /// Gives back the units, codes and allowance of an order (cancel, or a failed commit).
    pub fn release(&mut self, user: &str, qty: u64, codes: &[String]) {
        self.remaining = (self.remaining + qty).min(self.total);
        self.held.sub(user, qty);
        for code in codes.iter().rev() {
            self.pool.push_front(code.clone());
        }
    }

    /// The first of `codes` this campaign already has, if any.
    pub fn known_code<'a>(&self, codes: &'a [String]) -> Option<&'a String> {
        codes.iter().find(|c| self.all_codes.contains(*c))
    }

    pub fn add_units(&mut self, units: u64) {
        self.total += units;
        self.remaining += units;
    }

    pub fn add_codes(&mut self, codes: Vec<String>) {
        self.add_units(codes.len() as u64);
        self.all_codes.extend(codes.iter().cloned());
        self.pool.extend(codes);
    }

    pub fn view(&self) -> CampaignView {
        CampaignView {
            id: self.def.id.clone(),
            kind: self.def.kind,
            total: self.total,
            remaining: self.remaining,
            per_user_limit: self.def.per_user_limit,
            status: self.status,
            starts_at: self.def.starts_at,
            ends_at: self.def.ends_at,
            holds: self.def.hold_seconds.map(|hold_seconds| HoldsView {
                hold_seconds,
                pending: self.holds.units(),
            }),
            waiting_room: self.def.waiting_room,
        }
    }
}

/// A campaign rebuilt from the ledger one row at a time, so recovery never holds more than
/// the final state plus the codes held by active orders: first every code in hand-out order,
/// then every active order in any order, then [`Rebuild::finish`].
/// Most holders a [`Rebuild`] makes room for before it has seen them.
const MAX_RESERVED_HOLDERS: u64 = 1 << 24;

pub struct Rebuild {
    state: CampaignState,
    /// Codes held by active orders, to take out of the pool at the end.
    taken: HashSet<String>,
}

impl Rebuild {
    pub fn new(def: CampaignDef, total: u64, status: Status, max_seq: u64) -> Self {
        let mut state = CampaignState::new(def, total, Vec::new(), status);
        state.next_seq = max_seq + 1;
        // At most one holder per order and per unit; what is not used is given back at the end.
        let expected = max_seq.min(total).min(MAX_RESERVED_HOLDERS);
        state.held.reserve(expected as usize);
        Self {
            state,
            taken: HashSet::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.state.def.id
    }

    /// The next code the campaign ever had, in hand-out order.
    pub fn code(&mut self, code: String) {
        self.state.all_codes.insert(code.clone());
        self.state.pool.push_back(code);
    }

    /// One live order (active or confirmed).
    pub fn order(&mut self, user: &str, qty: u64, codes: &[String]) {
        let s = &mut self.state;
        s.remaining = s.remaining.saturating_sub(qty);
        s.held.add(user, qty);
        self.taken.extend(codes.iter().cloned());
    }

    /// One pending order, waiting for its confirm until `pay_by`.
    pub fn pending(
        &mut self,
        seq: u64,
        user: &str,
        qty: u64,
        codes: &[String],
        pay_by: DateTime<Utc>,
    ) {
        self.order(user, qty, codes);
        let held = Held {
            pay_by,
            user_id: user.to_owned(),
            qty,
            codes: codes.to_vec(),
        };
        self.state.holds.add(seq, held);
    }

    pub fn finish(self) -> CampaignState {
        let Self { mut state, taken } = self;
        if !taken.is_empty() {
            state.pool.retain(|c| !taken.contains(c));
        }
        state.held.shrink_to_fit();
        state
    }
}

mod holdings;
mod holds;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
