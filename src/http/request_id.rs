//! `X-Request-Id`: one id per request, so a buyer's "I was told 503 at 20:00:01" can be
//! matched with the log line that says why.
//!
//! The id is the client's own `X-Request-Id` when it is usable (1 to [`MAX_LEN`] visible
//! ASCII characters, so it can be quoted in a log line and a header as it is), otherwise one
//! generated here: this process's random prefix and a counter, unique across instances and
//! cheap enough for every claim of a storm. The connection's service
//! (`super::fast::Dispatch`) gives each request its id, returns it on the answer, and polls
//! the request's work with the id in [`CURRENT`], where error bodies
//! (`super::error::ApiError`) and every log line of the request (`crate::telemetry`) read it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// The header, in requests and answers.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest id taken from a client; a longer one is replaced.
pub const MAX_LEN: usize = 128;

tokio::task_local! {
    /// The id of the request whose work is being polled.
    pub static CURRENT: HeaderValue;
}

/// The id of the request being served here, if any.
pub fn current() -> Option<HeaderValue> {
    CURRENT.try_with(|id| id.clone()).ok()
}

/// The id of the request being served here as text, if any.
pub fn current_str() -> Option<String> {
    CURRENT
        .try_with(|id| id.to_str().ok().map(str::to_owned))
        .ok()
        .flatten()
}

/// Whether a client's id is kept: 1 to [`MAX_LEN`] visible ASCII characters.
pub fn usable(value: &[u8]) -> bool {
    !value.is_empty() && value.len() <= MAX_LEN && value.iter().all(|b| b.is_ascii_graphic())
}

/// The request's id: its own `X-Request-Id` when exactly one usable one is given, else a new
/// one.
pub fn of(headers: &HeaderMap) -> HeaderValue {
    let mut given = headers.get_all(&HEADER).iter();
    match (given.next(), given.next()) {
        (Some(v), None) if usable(v.as_bytes()) => v.clone(),
        _ => generate(),
    }
}

/// A new id: 12 hex digits of this process's random prefix, `-`, a 12-digit hex counter.
pub fn generate() -> HeaderValue {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| rand::random::<u64>() & 0xffff_ffff_ffff);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff_ffff;
    let mut buf = [0u8; 25];
    hex_into(&mut buf[..12], prefix);
    buf[12] = b'-';
    hex_into(&mut buf[13..], n);
    HeaderValue::from_bytes(&buf).expect("hex digits and a dash are a valid header value")
}

fn hex_into(out: &mut [u8], mut v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in out.iter_mut().rev() {
        *b = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usable_client_id_is_kept_and_anything_else_replaced() {
        let mut h = HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_static("order-7f3a"));
        assert_eq!(of(&h), "order-7f3a");
        for bad in [&b""[..], b"with space", &[b'a'; MAX_LEN + 1], b"tab\tin"] {
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_bytes(bad) {
                h.insert(HEADER, v);
            }
            let got = of(&h);
            assert_ne!(got.as_bytes(), bad);
            assert!(usable(got.as_bytes()), "{got:?}");
        }
        let mut two = HeaderMap::new();
        two.append(HEADER, HeaderValue::from_static("a"));
        two.append(HEADER, HeaderValue::from_static("b"));
        assert_eq!(of(&two).len(), 25);
    }

    #[test]
    fn generated_ids_differ_and_share_the_process_prefix() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert_eq!(a.as_bytes()[..13], b.as_bytes()[..13]);
        assert!(usable(a.as_bytes()));
    }
}
