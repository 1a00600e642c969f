//! Signed user identity: proof that a claim's `user_id` was issued by the operator's login.
//!
//! Without it, whoever knows a user id can claim in that user's name and burn that user's
//! rate limit. When a signing key is configured, every claim must carry
//!
//! ```text
//! X-Seckill-User: v1.<user_id as base64url, no padding>.<expiry, Unix seconds>.<mac>
//! mac = base64url(HMAC-SHA256(key, "v1.<user_id b64>.<expiry>"))
//! ```
//!
//! and the body's `user_id` must be the token's. The MAC is checked in constant time (the
//! `hmac` crate's `verify_slice`) before anything else about the token is believed. Tokens
//! are minted by the operator's login system (or `seckill sign-user`); seckill never issues
//! them itself. Without a key, seckill trusts `user_id`: deploy it behind a gateway that
//! authenticates users.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::secret::Secret;

/// Name of the header that carries the token.
pub const HEADER: &str = "x-seckill-user";

/// Shortest signing key accepted, in bytes.
pub const MIN_KEY_BYTES: usize = 16;

/// Why a claim's identity was refused (401 `unauthorized`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("this service needs a signed identity: send X-Seckill-User: v1.<user>.<expiry>.<mac>")]
    Missing,
    #[error("the X-Seckill-User token is malformed")]
    Malformed,
    #[error("the X-Seckill-User token's signature is wrong")]
    BadSignature,
    #[error("the X-Seckill-User token has expired")]
    Expired,
    #[error("the X-Seckill-User token was issued for another user_id")]
    WrongUser,
}

/// Signs and verifies identity tokens with one HMAC key.
#[derive(Clone, Debug)]
pub struct Identity {
    key: Secret,
}

impl Identity {
    pub fn new(key: Secret) -> Result<Self, String> {
        if key.expose().len() < MIN_KEY_BYTES {
            return Err(format!(
                "the user signing key must be at least {MIN_KEY_BYTES} bytes (32 random bytes recommended)"
            ));
        }
        Ok(Self { key })
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(self.key.expose().as_bytes())
            .expect("HMAC takes keys of any length")
    }

    /// A token for `user` valid until `expires_at` (Unix seconds).
    pub fn sign(&self, user: &str, expires_at: i64) -> String {
        let payload = format!("v1.{}.{expires_at}", URL_SAFE_NO_PAD.encode(user));
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    /// The user a token proves, if its MAC is right and it has not expired at `now`.
    pub fn verify(&self, token: &str, now: i64) -> Result<String, IdentityError> {
        let (payload, tag) = token.rsplit_once('.').ok_or(IdentityError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| IdentityError::Malformed)?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        mac.verify_slice(&tag)
            .map_err(|_| IdentityError::BadSignature)?;
        let mut parts = payload.split('.');
        let (Some("v1"), Some(user), Some(expiry), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(IdentityError::Malformed);
        };
        let expiry: i64 = expiry.parse().map_err(|_| IdentityError::Malformed)?;
        if now >= expiry {
            return Err(IdentityError::Expired);
        }
        let user = URL_SAFE_NO_PAD
            .decode(user)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or(IdentityError::Malformed)?;
        Ok(user)
    }

    /// Checks that `header` proves `user_id` at `now`.
    pub fn check(
        &self,
        header: Option<&str>,
        user_id: &str,
        now: i64,
    ) -> Result<(), IdentityError> {
        let token = header.ok_or(IdentityError::Missing)?;
        match self.verify(token.trim(), now)? {
            proven if proven == user_id => Ok(()),
            _ => Err(IdentityError::WrongUser),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(key: &str) -> Identity {
        Identity::new(Secret::new(key)).unwrap()
    }

    #[test]
    fn round_trip_and_refusals() {
        let good = id("0123456789abcdef-operator-key");
        let t = good.sign("u101", 1000);
        assert_eq!(good.verify(&t, 999).unwrap(), "u101");
        assert_eq!(good.check(Some(&t), "u101", 999), Ok(()));
        assert_eq!(
            good.check(Some(&t), "u102", 999),
            Err(IdentityError::WrongUser)
        );
        assert_eq!(
            good.check(Some(&t), "u101", 1000),
            Err(IdentityError::Expired)
        );
        assert_eq!(good.check(None, "u101", 0), Err(IdentityError::Missing));
        let forged = id("another-key-of-16-bytes-or-more").sign("u101", 1000);
        assert_eq!(good.verify(&forged, 0), Err(IdentityError::BadSignature));
        // Changing any part invalidates the MAC.
        let longer = t.replacen(".1000.", ".9999.", 1);
        assert_eq!(good.verify(&longer, 0), Err(IdentityError::BadSignature));
        for junk in ["", "v1", "v1.x.y", "a.b.c.d.e", "v1.dTEwMQ.1000.!!!"] {
            assert!(good.verify(junk, 0).is_err(), "{junk:?} accepted");
        }
    }

    #[test]
    fn keys_too_short_are_refused_and_never_printed() {
        assert!(Identity::new(Secret::new("short")).is_err());
        let shown = format!("{:?}", id("a-very-secret-signing-key"));
        assert!(!shown.contains("a-very-secret"), "{shown}");
    }
}
