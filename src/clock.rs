//! The time the embedded engine decides by, injectable so tests can move it.
//!
//! Order holds make time part of the state: a confirm at or after `pay_by` is refused and the
//! sweeper expires what passed its deadline. Tests of those rules must reach a deadline
//! without sleeping for minutes, so the engine reads the time through a [`Clock`]: the system
//! clock in production, a [`ManualClock`] (the system clock plus an offset the test moves
//! forward) in tests. Both truncate to the microseconds the ledgers store.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now, truncated to microseconds.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        crate::domain::now()
    }
}

/// The system clock shifted by an offset a test moves forward ([`ManualClock::advance`]), so
/// time keeps flowing (timeouts, group commits) while deadlines can be jumped to.
#[derive(Debug, Default)]
pub struct ManualClock {
    offset_us: AtomicI64,
}

impl ManualClock {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: std::time::Duration) {
        self.offset_us
            .fetch_add(by.as_micros() as i64, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        crate::domain::now() + TimeDelta::microseconds(self.offset_us.load(Ordering::Acquire))
    }
}

/// The clock a deployment uses; the system clock unless a test injects one.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_jumps_forward_and_keeps_flowing() {
        let c = ManualClock::new();
        let before = c.now();
        c.advance(std::time::Duration::from_secs(3600));
        let after = c.now();
        assert!(after - before >= TimeDelta::seconds(3600));
        assert!(after - before < TimeDelta::seconds(3660));
        assert_eq!(after.timestamp_subsec_nanos() % 1000, 0, "microseconds");
    }
}
