//! Refusals are not errors: a 503 is summarised, at most one log line a second.
//!
//! tower-http's trace layer logs every 5xx at ERROR. During a storm most 503s are the service
//! doing its job — shedding (`overloaded`), a client's share taken, a request timeout — and an
//! attacker decides how many there are: a line per refusal made the refusal path do a locked
//! write to stderr each time and drowned the errors that matter. Both doors (the router's trace
//! layer and the fast claim path) count a 503 here instead, and one WARN line a second says how
//! many there were; the metrics (`seckill_shed_total`, `seckill_timeouts_total`,
//! `seckill_claims_total`, `seckill_client_share_refused_total`) count each one. A 503 that is
//! not a refusal is also logged where it is answered (`ApiError::into_response`): an outcome
//! unknown each time; a part unavailable (Redis down, too few replicas in sync, a campaign
//! being rebuilt: nothing was changed) in at most one ERROR line a second with the latest
//! message and a count, since in a storm it is one per claim. Any other 5xx is logged as the
//! trace layer always did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::{DefaultOnFailure, OnFailure};

/// A count reported in at most one line a second.
struct Summary {
    /// Events since the last line.
    since: AtomicU64,
    /// When the last line was written, in ms since [`epoch`] (0: never).
    last_ms: AtomicU64,
}

impl Summary {
    const fn new() -> Self {
        Self {
            since: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    /// Counts one event; `Some(events since the last line)` when this one writes the line.
    fn count(&self) -> Option<u64> {
        self.since.fetch_add(1, Ordering::Relaxed);
        let now = epoch().elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != 0 && now < last + 1000 {
            return None;
        }
        self.last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
            .then(|| self.since.swap(0, Ordering::Relaxed).max(1))
    }
}

/// 503s answered, any reason.
static REFUSED: Summary = Summary::new();
/// 503s answered because a part the engine needs is unavailable (nothing was changed).
static UNAVAILABLE: Summary = Summary::new();

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// A 503 "nothing was changed" because a part is unavailable (Redis down, too few replicas in
/// sync, a campaign being rebuilt): an error worth a line, but during a storm one per claim
/// would be thousands a second, so one ERROR line a second carries the latest message and how
/// many such answers it stands for.
pub fn unavailable(code: &str, message: &str) {
    if let Some(n) = UNAVAILABLE.count() {
        tracing::error!(
            status = 503,
            code,
            answered = n,
            message,
            "answered a server error ({n} such answers since the last line)"
        );
    }
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
    if let Some(n) = REFUSED.count() {
        tracing::warn!(
            answered = n,
            "answered 503 (overloaded, shed, timed out or outcome unknown) to {n} requests since the last summary; see seckill_shed_total, seckill_timeouts_total, seckill_claims_total"
        );
    }
}
