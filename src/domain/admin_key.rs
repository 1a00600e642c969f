//! `Idempotency-Key` on admin POSTs: what a key remembers and when a retry matches it.
//!
//! A key is scoped to its target (the campaign id) and remembers which operation it was used
//! for and a fingerprint of that request (SHA-256 over the definition or the restock). The
//! record is written in the same ledger transaction as the change it guards, so "the change
//! happened" and "the key is known" are one fact. A retry with the same key and the same
//! request changes nothing and answers the target's current state; the same key with another
//! request is a 409.

use sha2::{Digest, Sha256};

use super::{Error, IdempotencyKey, NewCampaign, Restock, Status, Supply};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminKey {
    pub key: String,
    /// The campaign the request targets.
    pub scope: String,
    /// `create`, `restock`, `pause`, `resume` or `close`.
    pub op: String,
    /// Hex SHA-256 of the request's content (empty for status changes).
    pub fingerprint: String,
}

fn hash(parts: impl IntoIterator<Item = String>) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    hex::encode(h.finalize())
}

fn codes_part(codes: &[String]) -> impl Iterator<Item = String> + '_ {
    codes.iter().cloned()
}

impl AdminKey {
    pub fn create(key: IdempotencyKey, c: &NewCampaign) -> Self {
        let (supply, codes): (String, &[String]) = match &c.supply {
            Supply::Stock(n) => (format!("stock={n}"), &[]),
            Supply::Codes(codes) => (format!("codes={}", codes.len()), codes),
        };
        let mut head = vec![
            c.id.clone(),
            supply,
            c.per_user_limit.to_string(),
            format!("{:?}", c.starts_at.map(|t| t.timestamp_micros())),
            format!("{:?}", c.ends_at.map(|t| t.timestamp_micros())),
        ];
        // Only when set, so keys stored before holds existed keep their fingerprints.
        if let Some(h) = c.hold_seconds {
            head.push(format!("hold={h}"));
        }
        if let Some(w) = &c.waiting_room {
            head.push(format!("room={}", w.to_ledger()));
        }
        Self {
            key: key.as_str().to_owned(),
            scope: c.id.clone(),
            op: "create".into(),
            fingerprint: hash(head.into_iter().chain(codes_part(codes))),
        }
    }

    pub fn restock(key: IdempotencyKey, id: &str, r: &Restock) -> Self {
        let fingerprint = match r {
            Restock::Units(n) => hash([format!("units={n}")]),
            Restock::Codes(c) => {
                hash(std::iter::once(format!("codes={}", c.len())).chain(codes_part(c)))
            }
        };
        Self {
            key: key.as_str().to_owned(),
            scope: id.to_owned(),
            op: "restock".into(),
            fingerprint,
        }
    }

    pub fn status(key: IdempotencyKey, id: &str, to: Status) -> Self {
        let op = match to {
            Status::Active => "resume",
            Status::Paused => "pause",
            Status::Closed => "close",
        };
        Self {
            key: key.as_str().to_owned(),
            scope: id.to_owned(),
            op: op.into(),
            fingerprint: String::new(),
        }
    }

    /// Given what the ledger remembers for this (scope, key): `Ok` when it is this request
    /// again, a conflict when the key was used for a different one.
    pub fn check_replay(&self, op: &str, fingerprint: &str) -> Result<(), Error> {
        if op == self.op && fingerprint == self.fingerprint {
            return Ok(());
        }
        Err(Error::Conflict(format!(
            "Idempotency-Key {:?} was already used for a different {op} request on '{}'",
            self.key, self.scope
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> IdempotencyKey {
        IdempotencyKey::new("k1").unwrap()
    }

    #[test]
    fn same_request_matches_and_another_conflicts() {
        let a = AdminKey::restock(key(), "c", &Restock::Units(5));
        let again = AdminKey::restock(key(), "c", &Restock::Units(5));
        let other = AdminKey::restock(key(), "c", &Restock::Units(6));
        assert!(again.check_replay(&a.op, &a.fingerprint).is_ok());
        assert!(other.check_replay(&a.op, &a.fingerprint).is_err());
        let pause = AdminKey::status(key(), "c", Status::Paused);
        assert!(pause.check_replay(&a.op, &a.fingerprint).is_err());
        // Length-prefixed parts: ["ab","c"] and ["a","bc"] differ.
        let x = AdminKey::restock(key(), "c", &Restock::Codes(vec!["ab".into(), "c".into()]));
        let y = AdminKey::restock(key(), "c", &Restock::Codes(vec!["a".into(), "bc".into()]));
        assert_ne!(x.fingerprint, y.fingerprint);
    }
}
