//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): the receiver checks
//! `webhook-signature` = `v1,` + base64(HMAC-SHA256(key, "{webhook-id}.{webhook-timestamp}.{body}"))
//! with the endpoint's secret `whsec_` + base64(key), and refuses a timestamp far from its
//! clock, so a captured request cannot be replayed later. [`verify`] is the receiver's side,
//! for `seckill events receive` and the tests.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The prefix of a secret in the Standard Webhooks format.
pub const PREFIX: &str = "whsec_";
/// How far a timestamp may be from the receiver's clock (the specification's five minutes).
pub const TOLERANCE_SECS: i64 = 300;

/// A signing key, parsed from `whsec_…`.
#[derive(Clone)]
pub struct Key(Vec<u8>);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("a webhook secret is `whsec_` followed by base64 (it has no `whsec_` prefix)")]
    Prefix,
    #[error("a webhook secret is `whsec_` followed by base64 (the rest is not base64)")]
    Base64,
    #[error("a webhook secret's key must be 24 to 64 bytes (it is {0})")]
    Length(usize),
}

impl Key {
    pub fn parse(secret: &str) -> Result<Key, KeyError> {
        let b64 = secret.strip_prefix(PREFIX).ok_or(KeyError::Prefix)?;
        let key = STANDARD.decode(b64).map_err(|_| KeyError::Base64)?;
        if !(24..=64).contains(&key.len()) {
            return Err(KeyError::Length(key.len()));
        }
        Ok(Key(key))
    }

    /// A new random key's secret.
    pub fn generate() -> String {
        format!("{PREFIX}{}", STANDARD.encode(rand::random::<[u8; 32]>()))
    }

    /// The `webhook-signature` header of a message.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!("v1,{}", STANDARD.encode(self.mac(id, timestamp, body)))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.finalize().into_bytes().to_vec()
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("webhook-timestamp is not a number of seconds")]
    Timestamp,
    #[error("webhook-timestamp is {0} s away from this clock (at most {TOLERANCE_SECS})")]
    Skew(i64),
    #[error("no v1 signature in webhook-signature matches")]
    Mismatch,
}

/// Checks a received message: its timestamp within [`TOLERANCE_SECS`] of `now` and one of
/// the space-separated `v1,` signatures its own.
pub fn verify(
    key: &Key,
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now: i64,
) -> Result<(), VerifyError> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::Timestamp)?;
    if (now - ts).abs() > TOLERANCE_SECS {
        return Err(VerifyError::Skew(now - ts));
    }
    let want = key.mac(id, ts, body);
    let ok = signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|s| STANDARD.decode(s).ok())
        .any(|got| bool::from(got.ct_eq(&want)));
    ok.then_some(()).ok_or(VerifyError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification's reference libraries.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &str = r#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn signs_as_the_specification_s_example() {
        let key = Key::parse(SECRET).unwrap();
        assert_eq!(key.sign(ID, TS, BODY.as_bytes()), SIG);
        assert_eq!(
            verify(&key, ID, "1614265330", SIG, BODY.as_bytes(), TS + 10),
            Ok(())
        );
    }

    #[test]
    fn refuses_a_changed_body_an_old_timestamp_and_bad_secrets() {
        let key = Key::parse(SECRET).unwrap();
        let other = format!("v1,bad v1,{}", &SIG[3..]);
        assert_eq!(
            verify(&key, ID, "1614265330", &other, BODY.as_bytes(), TS),
            Ok(())
        );
        assert_eq!(
            verify(&key, ID, "1614265330", SIG, b"{}", TS),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(&key, ID, "1614265330", SIG, BODY.as_bytes(), TS + 301),
            Err(VerifyError::Skew(301))
        );
        assert_eq!(Key::parse("MfKQ").unwrap_err(), KeyError::Prefix);
        assert_eq!(Key::parse("whsec_!!").unwrap_err(), KeyError::Base64);
        assert_eq!(Key::parse("whsec_AAAA").unwrap_err(), KeyError::Length(3));
        assert!(Key::parse(&Key::generate()).is_ok());
    }
}
