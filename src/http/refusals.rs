//! Refusals are not errors: a 503 is summarised, at most one log line a second.
//!
//! tower-http's trace layer logs every 5xx at ERROR. During a storm most 503s are the service
//! doing its job — shedding (`overloaded`), a client's share taken, a request timeout — and an
//! attacker decides how many there are: a line per refusal made the refusal path do a locked
//! write to stderr each time and drowned the errors that matter. Both doors (the router's trace
//! layer and the fast claim path) count a 503 here instead, and one WARN line a second says how
//! many there were; the metrics (`seckill_shed_total`, `seckill_timeouts_total`,
//! `seckill_claims_total`, `seckill_client_share_refused_total`) count each one, and a 503
//! that is not a refusal (the engine or ledger failing, an outcome unknown) is also logged on
//! its own where it is answered (`ApiError::into_response`). Any other 5xx is logged as the
//! trace layer always did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::{DefaultOnFailure, OnFailure};

/// 503s since the last summary line.
static SINCE: AtomicU64 = AtomicU64::new(0);
/// When the last summary line was written, in ms since [`epoch`] (0: never).
static LAST_MS: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The trace layer's failure hook: 503s summarised, other failures as before.
#[derive(Debug, Clone, Copy, Default)]
pub struct Refusals;

impl OnFailure<ServerErrorsFailureClass> for Refusals {
    fn on_failure(
        &mut self,
        class: ServerErrorsFailureClass,
        latency: Duration,
        span: &tracing::Span,
    ) {
        match class {
            ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE) => refused(),
            other => DefaultOnFailure::new().on_failure(other, latency, span),
        }
    }
}

/// Counts one 503; writes the summary line when the last one is a second old.
fn refused() {
    SINCE.fetch_add(1, Ordering::Relaxed);
    let now = epoch().elapsed().as_millis() as u64 + 1;
    let last = LAST_MS.load(Ordering::Relaxed);
    if last != 0 && now < last + 1000 {
        return;
    }
    if LAST_MS
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        let n = SINCE.swap(0, Ordering::Relaxed).max(1);
        tracing::warn!(
            answered = n,
            "answered 503 (overloaded, shed, timed out or outcome unknown) to {n} requests since the last summary; see seckill_shed_total, seckill_timeouts_total, seckill_claims_total"
        );
    }
}
