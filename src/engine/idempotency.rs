//! Idempotency slots of one campaign: the first processed answer per (user, key), within a
//! bound one client cannot push.
//!
//! A slot is `Pending` from the moment the atomic step decides until the decision is durable;
//! concurrent retries with the same key wait on it instead of claiming again, and then all get
//! the identical answer. If the commit fails the slot is removed, so a later retry is processed
//! afresh (nothing was claimed).
//!
//! What is kept, and for how long ([`IdemLimits`]): the answer of a claim that changed state
//! (`won`) is always kept, for the full retention (24 h): a retry must never claim twice, and
//! there are at most as many of them as units sold. The answer of a claim that changed nothing
//! (every other outcome) is kept for a short retention, and only while its user has fewer than
//! `per_user` and the campaign fewer than `per_campaign` such answers kept; beyond that the
//! claim is still processed and answered, its answer is just not remembered, so a retry is
//! processed afresh. Forgetting an answer that changed nothing can never make a retry claim
//! twice; remembering every one would let a single client fill memory and disk with fresh keys.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::domain::{ClaimAnswer, Error, Outcome};
use crate::ledger::{CommitError, CommitFault};

/// What waiters receive: the answer, or why it could not be made durable.
pub type Settled = Option<Result<ClaimAnswer, CommitError>>;

pub enum Slot {
    /// A decision on its way to the ledger; `true` if it changed nothing (a rejection).
    Pending(watch::Receiver<Settled>, bool),
    Done(ClaimAnswer, DateTime<Utc>),
}

impl Slot {
    fn rejected(&self) -> bool {
        match self {
            Slot::Pending(_, rejected) => *rejected,
            Slot::Done(answer, _) => is_rejection(answer),
        }
    }
}

/// Whether an answer changed nothing (any outcome but `won`).
pub fn is_rejection(answer: &ClaimAnswer) -> bool {
    answer.outcome != Outcome::Won
}

/// How many answers of claims that changed nothing are kept, and how long.
#[derive(Debug, Clone, Copy)]
pub struct IdemLimits {
    pub rejected_ttl: chrono::Duration,
    pub per_user: usize,
    pub per_campaign: usize,
}

impl Default for IdemLimits {
    fn default() -> Self {
        Self {
            rejected_ttl: chrono::Duration::minutes(10),
            per_user: 64,
            per_campaign: 100_000,
        }
    }
}

#[derive(Default)]
pub struct IdemSlots {
    slots: HashMap<(String, String), Slot>,
    limits: IdemLimits,
    /// Kept rejections (pending or done) per user, and in all.
    rejected_by_user: HashMap<String, usize>,
    rejected: usize,
}

impl IdemSlots {
    pub fn new(limits: IdemLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    pub fn get(&self, user: &str, key: &str) -> Option<&Slot> {
        // Tuple keys cannot be borrowed as (&str, &str); the clone happens only with a key.
        self.slots.get(&(user.to_owned(), key.to_owned()))
    }

    /// Whether one more rejection of `user` may be kept.
    pub fn may_keep_rejection(&self, user: &str) -> bool {
        self.rejected < self.limits.per_campaign
            && self.rejected_by_user.get(user).copied().unwrap_or(0) < self.limits.per_user
    }

    pub fn insert(&mut self, user: String, key: String, slot: Slot) {
        let rejected = slot.rejected();
        if rejected {
            self.count(&user, 1);
        }
        if let Some(old) = self.slots.insert((user.clone(), key), slot) {
            if old.rejected() {
                self.count(&user, -1);
            }
        }
    }

    pub fn remove(&mut self, user: &str, key: &str) {
        if let Some(old) = self.slots.remove(&(user.to_owned(), key.to_owned())) {
            if old.rejected() {
                self.count(user, -1);
            }
        }
    }

    fn count(&mut self, user: &str, by: isize) {
        self.rejected = self.rejected.saturating_add_signed(by);
        if by > 0 {
            *self.rejected_by_user.entry(user.to_owned()).or_default() += 1;
        } else if let Some(n) = self.rejected_by_user.get_mut(user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.rejected_by_user.remove(user);
            }
        }
    }

    /// Whether a settled answer from `at` is still within its retention at `now` (`won_ttl`
    /// for answers that changed state, the short retention for the others).
    pub fn keeps(
        &self,
        answer: &ClaimAnswer,
        at: DateTime<Utc>,
        won_cutoff: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> bool {
        let cutoff = if is_rejection(answer) {
            now - self.limits.rejected_ttl
        } else {
            won_cutoff
        };
        at >= cutoff
    }

    /// Forgets answers past their retention (`won_cutoff` for `won`); returns how many.
    pub fn prune(&mut self, won_cutoff: DateTime<Utc>, now: DateTime<Utc>) -> usize {
        let expired: Vec<(String, String)> = self
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Done(a, at) if !self.keeps(a, *at, won_cutoff, now)))
            .map(|(k, _)| k.clone())
            .collect();
        for (user, key) in &expired {
            self.remove(user, key);
        }
        expired.len()
    }

    /// Answers kept, and how many of them changed nothing.
    #[cfg(test)]
    fn kept(&self) -> (usize, usize) {
        (self.slots.len(), self.rejected)
    }
}

/// Waits for a pending decision to settle.
pub async fn wait(mut rx: watch::Receiver<Settled>) -> Result<ClaimAnswer, Error> {
    let settled = rx
        .wait_for(Option::is_some)
        .await
        .map_err(|_| Error::Unavailable("the claim could not be completed; retry".into()))?;
    match settled.clone().expect("waited for Some") {
        Ok(answer) => Ok(answer),
        Err(e) => Err(commit_failed(e)),
    }
}

/// The answer to a request whose write did not become durable: "nothing was changed" when
/// that is certain, "outcome unknown" when the ledger failed mid-commit.
pub fn commit_failed(e: CommitError) -> Error {
    match e.fault {
        CommitFault::Unknown => Error::OutcomeUnknown(format!(
            "the ledger failed while committing this request ({}); it may or may not have \
             taken effect: retry with the same Idempotency-Key, or read the state back",
            e.reason
        )),
        _ => Error::not_committed(&e.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(outcome: Outcome) -> ClaimAnswer {
        ClaimAnswer::bare(outcome)
    }

    #[test]
    fn rejections_are_capped_per_user_and_campaign_and_expire_sooner() {
        let limits = IdemLimits {
            rejected_ttl: chrono::Duration::minutes(10),
            per_user: 2,
            per_campaign: 3,
        };
        let mut s = IdemSlots::new(limits);
        let t0 = Utc::now();
        for k in ["a", "b"] {
            assert!(s.may_keep_rejection("u"));
            s.insert(
                "u".into(),
                k.into(),
                Slot::Done(answer(Outcome::SoldOut), t0),
            );
        }
        assert!(!s.may_keep_rejection("u"), "per-user cap");
        assert!(s.may_keep_rejection("v"));
        s.insert(
            "v".into(),
            "a".into(),
            Slot::Done(answer(Outcome::SoldOut), t0),
        );
        assert!(!s.may_keep_rejection("w"), "per-campaign cap");
        // Wins are not counted.
        s.insert("w".into(), "a".into(), Slot::Done(answer(Outcome::Won), t0));
        assert_eq!(s.kept(), (4, 3));
        // Replacing a pending rejection by its settled answer does not count twice.
        s.remove("v", "a");
        let (_tx, rx) = watch::channel(None);
        s.insert("v".into(), "b".into(), Slot::Pending(rx, true));
        s.insert(
            "v".into(),
            "b".into(),
            Slot::Done(answer(Outcome::Paused), t0),
        );
        assert_eq!(s.kept(), (4, 3));
        // Eleven minutes on, the rejections are gone and the win stays.
        let later = t0 + chrono::Duration::minutes(11);
        assert_eq!(s.prune(t0 - chrono::Duration::hours(24), later), 3);
        assert_eq!(s.kept(), (1, 0));
        assert!(s.may_keep_rejection("u"));
    }
}
