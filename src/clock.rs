//! The time the embedded engine decides by, injectable so tests can move it.
//!
//! Order holds make time part of the state: a confirm at or after `pay_by` is refused and the
//! sweeper expires what passed its deadline. Tests of those rules must reach a deadline
//! without sleeping for minutes, so the engine reads the time through a [`Clock`]: the system
//! clock in production, a [`ManualClock`] (the system clock plus an offset the test moves
//! forward) in tests. Both truncate to the microseconds the ledgers store.
//!
//! The system clock itself is read once per process ([`steady`]) and advanced by the
//! boot-time clock from then on. A wall clock is stepped — by NTP after a suspend or a VM
//! migration, by an operator, by minutes at times — and every rule here that reads time would
//! move with it: a step forward expires every hold at once and drops remembered rejections, a
//! step back lets a buyer confirm minutes after the `pay_by` they were given. The boot-time
//! clock is slewed by NTP like the wall clock but never stepped, and counts through a suspend,
//! so deadlines hold in real time. The price: after a step the process keeps its own time until it restarts;
//! [`watch_steps`] says so in the log and in `seckill_clock_step_seconds`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// Now: the system clock as first read by this process, plus the time elapsed since on a
/// clock that is never stepped (`elapsed_since_boot`).
pub fn steady() -> DateTime<Utc> {
    static ANCHOR: OnceLock<(Duration, DateTime<Utc>)> = OnceLock::new();
    let (boot, wall) = *ANCHOR.get_or_init(|| (elapsed_since_boot(), Utc::now()));
    let since = elapsed_since_boot().saturating_sub(boot);
    wall + TimeDelta::from_std(since).unwrap_or_default()
}

/// Linux's `CLOCK_BOOTTIME`: slewed by NTP like the wall clock, never stepped, and unlike
/// `CLOCK_MONOTONIC` (Rust's `Instant`) it keeps counting while the machine is suspended, so a
/// suspended VM does not come back with seckill's time behind by the suspension.
#[cfg(target_os = "linux")]
fn elapsed_since_boot() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        // Refused (a sandbox filtering the call): the monotonic clock, which never fails.
        return monotonic();
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Elsewhere: the monotonic clock.
#[cfg(not(target_os = "linux"))]
fn elapsed_since_boot() -> Duration {
    monotonic()
}

/// The monotonic clock since this process first read it. Only ever used by one process for
/// all its reads (a kernel refuses CLOCK_BOOTTIME always or never), so its origin is fixed.
fn monotonic() -> Duration {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// How far the system clock reads from [`steady`] (positive: ahead), e.g. after a step.
pub fn system_step() -> TimeDelta {
    Utc::now() - steady()
}

/// A step below this is noise (scheduling between the two reads, NTP slewing the two clocks
/// apart by microseconds); above it, the log says so.
const STEP_WORTH_TELLING: TimeDelta = TimeDelta::seconds(1);

/// Starts [`watch_steps`] once per process (servers started in one test process share it).
pub fn spawn_step_watch() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| drop(tokio::spawn(watch_steps())));
}

/// Every 5 s: how far the system clock stepped from the time this process keeps and, each
/// time that changes by a second or more, a warning (`/metrics` reads it at each scrape as
/// `seckill_clock_step_seconds`).
pub async fn watch_steps() {
    let mut told = TimeDelta::zero();
    loop {
        let step = system_step();
        if (step - told).abs() >= STEP_WORTH_TELLING {
            told = step;
            tracing::warn!(
                step_seconds = step.as_seconds_f64(),
                "the system clock stepped from the time seckill keeps; deadlines, holds and \
                 retention keep running on seckill's time (a restart takes the system's)"
            );
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

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
        now()
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
        now() + TimeDelta::microseconds(self.offset_us.load(Ordering::Acquire))
    }
}

/// The clock a deployment uses; the system clock unless a test injects one.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// The current time as seckill keeps it ([`steady`]: a step of the system clock moves no
/// deadline), truncated to the microseconds every ledger stores, so an answer built from
/// memory equals the same value read back from the ledger.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    use chrono::DurationRound;
    let t = steady();
    t.duration_trunc(chrono::TimeDelta::microseconds(1))
        .unwrap_or(t)
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
