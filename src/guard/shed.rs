//! Overload shedding: a global bound on public requests in flight, and a request timeout.
//!
//! Past the bound, a request is answered 503 `overloaded` with `Retry-After` at once, before
//! its body is read, instead of queueing and making every request slower. The timeout
//! frees places held by clients that trickle their body or by a stuck dependency. Health,
//! admin and metrics routes are outside both, so operators can still see and steer the service
//! during a claim storm.
//!
//! A timeout may fire while a claim is inside the engine. Claims are cancel-safe (the engine
//! finishes the decision and its commit whether or not anyone waits), so the outcome is never
//! half-applied; a client that retries with the same `Idempotency-Key` learns it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub struct Shedder {
    permits: Arc<Semaphore>,
    max: usize,
    pub timeout: Duration,
}

impl Shedder {
    pub fn new(max_in_flight: usize, timeout: Duration) -> Self {
        let max = max_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            timeout,
        }
    }

    /// Requests holding a place now.
    pub fn in_flight(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    /// A place for one request, or `None` when all are taken (never waits).
    pub fn try_enter(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_released() {
        let s = Shedder::new(2, Duration::from_secs(1));
        let a = s.try_enter().unwrap();
        let _b = s.try_enter().unwrap();
        assert!(s.try_enter().is_none());
        drop(a);
        assert!(s.try_enter().is_some());
    }
}
