//! The Redis key layout of one campaign.
//!
//! Every key of a campaign carries the hash tag `{c:<id>}`, so all of them live in one Redis
//! Cluster slot and each script touches a single slot (campaign ids are `[A-Za-z0-9_-]`, so
//! they never contain a brace).

/// Consumer group of every order stream.
pub const GROUP: &str = "seckill";

/// Set of the ids of campaigns with holds, for the expiry sweepers of every instance. Not in
/// any campaign's slot: written on its own before the campaign is installed (a member whose
/// campaign is not in Redis is skipped by the sweep).
pub const HOLDS_SET: &str = "seckill:holds";

pub struct Keys {
    tag: String,
}

impl Keys {
    pub fn new(campaign_id: &str) -> Self {
        Self {
            tag: format!("{{c:{campaign_id}}}"),
        }
    }

    pub fn meta(&self) -> String {
        format!("{}:meta", self.tag)
    }

    pub fn users(&self) -> String {
        format!("{}:users", self.tag)
    }

    pub fn codes(&self) -> String {
        format!("{}:codes", self.tag)
    }

    pub fn seq(&self) -> String {
        format!("{}:seq", self.tag)
    }

    pub fn orders(&self) -> String {
        format!("{}:orders", self.tag)
    }

    /// Orders in the stream beyond one per entry (a batch entry of `claims.lua` holds many):
    /// added when a batch entry is appended, taken off when it is acknowledged, so the orders
    /// not yet in the ledger are `XLEN` of the stream plus this.
    pub fn packed(&self) -> String {
        format!("{}:packed", self.tag)
    }

    pub fn released(&self) -> String {
        format!("{}:released", self.tag)
    }

    /// Pending orders of a campaign with holds: order id → user, qty, at, pay_by, codes.
    pub fn held(&self) -> String {
        format!("{}:held", self.tag)
    }

    /// Pending order ids by `pay_by` (µs).
    pub fn deadlines(&self) -> String {
        format!("{}:deadlines", self.tag)
    }

    /// Resolutions of pending orders: order id → state, resolved_at, the held lines.
    pub fn resolved(&self) -> String {
        format!("{}:resolved", self.tag)
    }

    /// The stored answer of (user, Idempotency-Key). The user id is length-prefixed, so user
    /// `a:b` with key `c` and user `a` with key `b:c` never share a key.
    pub fn idem(&self, user: &str, key: &str) -> String {
        format!("{}:idem:{}:{user}:{key}", self.tag, user.len())
    }

    /// Prefix of the hashes that count kept rejection answers per time bucket (claim.lua).
    pub fn idem_rejected(&self) -> String {
        format!("{}:idemrej:", self.tag)
    }
}

/// The campaign id of a stream key `{c:<id>}:orders`.
pub fn campaign_of_stream(key: &str) -> Option<&str> {
    key.strip_prefix("{c:")?.strip_suffix("}:orders")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("double11");
        assert_eq!(k.meta(), "{c:double11}:meta");
        assert_eq!(k.idem("a:b", "c"), "{c:double11}:idem:3:a:b:c");
        assert_ne!(k.idem("a:b", "c"), k.idem("a", "b:c"));
        assert_eq!(campaign_of_stream(&k.orders()), Some("double11"));
    }
}
