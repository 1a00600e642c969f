//! What both deployments share about holds: the resolution counters behind `/metrics` and the
//! wording of a confirm's refusals, so the embedded and the scale-out answers are identical.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::domain::{Error, Order};

/// Counters of the resolutions, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct HoldStats {
    confirmed: AtomicU64,
    expired: AtomicU64,
    /// Sum and maximum of the time from `pay_by` to the units being back, in microseconds.
    lateness_sum_us: AtomicU64,
    lateness_max_us: AtomicU64,
}

impl HoldStats {
    pub(crate) fn confirmed(&self) {
        self.confirmed_many(1);
    }

    /// `n` orders confirmed (one batch).
    pub(crate) fn confirmed_many(&self, n: u64) {
        self.confirmed.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` orders expired, their lateness summing to `sum_us` with `max_us` the largest.
    pub(crate) fn expired(&self, n: u64, sum_us: u64, max_us: u64) {
        self.expired.fetch_add(n, Ordering::Relaxed);
        self.lateness_sum_us.fetch_add(sum_us, Ordering::Relaxed);
        self.lateness_max_us.fetch_max(max_us, Ordering::Relaxed);
    }

    /// Sets the holds' families of `/metrics` (at scrape time, from these counters).
    pub(crate) fn refresh(&self, registry: &crate::telemetry::Registry) {
        use crate::telemetry::catalog;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        registry
            .counter(catalog::HOLDS_CONFIRMED, vec![])
            .absolute(r(&self.confirmed));
        registry
            .counter(catalog::HOLDS_EXPIRED, vec![])
            .absolute(r(&self.expired));
        // The exporter's counters are whole numbers: the sum of seconds is a gauge that only
        // grows (microsecond resolution).
        registry
            .gauge(catalog::HOLDS_LATENESS_SUM, vec![])
            .set(r(&self.lateness_sum_us) as f64 / 1e6);
        registry
            .gauge(catalog::HOLDS_LATENESS_MAX, vec![])
            .set(r(&self.lateness_max_us) as f64 / 1e6);
    }
}

/// A confirm decided at or after the order's `pay_by` (409).
pub(crate) fn overdue(order: &Order) -> Error {
    let pay_by = order
        .pay_by
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default();
    Error::Conflict(format!(
        "order '{}' had to be confirmed before {pay_by}; it is {} and can no longer be confirmed",
        order.order_id,
        order.state.as_str()
    ))
}

/// A confirm of an order resolved otherwise (expired or cancelled; 409).
pub(crate) fn not_confirmable(order: &Order) -> Error {
    Error::Conflict(format!(
        "order '{}' is {}; it can no longer be confirmed",
        order.order_id,
        order.state.as_str()
    ))
}

/// A confirm of an order of a campaign without holds (400).
pub(crate) fn no_holds(order_id: &str) -> Error {
    Error::invalid(format!(
        "order '{order_id}' belongs to a campaign without holds; there is nothing to confirm"
    ))
}

/// A resolution found the order half-way through another one (503, nothing changed).
pub(crate) fn being_resolved(order_id: &str) -> Error {
    Error::Unavailable(format!(
        "order '{order_id}' is being resolved; nothing was changed, retry"
    ))
}
