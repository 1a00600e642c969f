//! Idempotency slots of one campaign: the first processed answer per (user, key).
//!
//! A slot is `Pending` from the moment the atomic step decides until the decision is durable;
//! concurrent retries with the same key wait on it instead of claiming again, and then all get
//! the identical answer. If the commit fails the slot is removed, so a later retry is processed
//! afresh (nothing was claimed).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::domain::{ClaimAnswer, Error};
use crate::ledger::{CommitError, CommitFault};

/// What waiters receive: the answer, or why it could not be made durable.
pub type Settled = Option<Result<ClaimAnswer, CommitError>>;

pub enum Slot {
    Pending(watch::Receiver<Settled>),
    Done(ClaimAnswer, DateTime<Utc>),
}

#[derive(Default)]
pub struct IdemSlots {
    slots: HashMap<(String, String), Slot>,
}

impl IdemSlots {
    pub fn get(&self, user: &str, key: &str) -> Option<&Slot> {
        // Tuple keys cannot be borrowed as (&str, &str); the clone happens only with a key.
        self.slots.get(&(user.to_owned(), key.to_owned()))
    }

    pub fn insert(&mut self, user: String, key: String, slot: Slot) {
        self.slots.insert((user, key), slot);
    }

    pub fn remove(&mut self, user: &str, key: &str) {
        self.slots.remove(&(user.to_owned(), key.to_owned()));
    }

    /// Forgets answers settled before `cutoff`; returns how many.
    pub fn prune(&mut self, cutoff: DateTime<Utc>) -> usize {
        let before = self.slots.len();
        self.slots
            .retain(|_, s| !matches!(s, Slot::Done(_, at) if *at < cutoff));
        before - self.slots.len()
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
