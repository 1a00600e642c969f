//! The guards' metrics and `GET /metrics` (admin only), through the `metrics` facade.
//!
//! Counters on the claim path are handles of the instance's [`Registry`], registered once;
//! the per-campaign stock and guard counters kept on the stock board are copied into their
//! series at scrape time. Per-campaign series exist only for campaigns on the stock board
//! (see `telemetry::registry` for the label bound), so clients cannot mint new series by
//! sending made-up campaign ids.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::telemetry::catalog;
use crate::telemetry::claims::{CampaignSeries, ClaimEnd};
use crate::telemetry::Registry;

use super::soldout::{StockBoard, StockEntry};

#[derive(Default)]
pub struct GuardMetrics {
    pub registry: Registry,
}

impl std::fmt::Debug for GuardMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuardMetrics")
    }
}

impl GuardMetrics {
    pub fn rate_limited(&self, label: &str) {
        let r = &self.registry;
        match label {
            "capacity" => r.rate_limited_capacity.increment(1),
            l if l.ends_with("user") => r.rate_limited_user.increment(1),
            _ => r.rate_limited_ip.increment(1),
        }
    }

    /// Counts a claim's answer: its campaign's series (`other` when the campaign is not on
    /// the board) and its latency.
    pub fn claim(&self, entry: Option<&StockEntry>, end: ClaimEnd, seconds: f64) {
        let r = &self.registry;
        match entry {
            Some(e) => e.series(r).count(end),
            None => r.other().count(end),
        }
        r.claim_answered(end, seconds);
    }

    /// The per-address shares' refusals so far (`share.rs`): requests, connections.
    pub fn shares_refused(&self, requests: u64, connections: u64) {
        self.registry.share_refused_requests.absolute(requests);
        self.registry
            .share_refused_connections
            .absolute(connections);
    }

    /// Copies the board's per-campaign state into its series; `in_flight` public requests.
    pub fn refresh(&self, board: &StockBoard, in_flight: usize) {
        let r = &self.registry;
        r.in_flight.set(in_flight as f64);
        let mut overflow = 0;
        for (id, e) in board.all() {
            let series: &Arc<CampaignSeries> = e.series(r);
            if r.is_other(series) {
                overflow += 1;
                continue;
            }
            let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
            let c = &e.counters;
            for (name, value) in [
                (catalog::CAMPAIGN_ENGINE_CLAIMS, get(&c.engine_claims)),
                (catalog::CAMPAIGN_FAST_SOLD_OUT, get(&c.fast_sold_out)),
                (
                    catalog::CAMPAIGN_ADMISSION_REFUSED,
                    get(&c.admission_refused),
                ),
            ] {
                r.campaign_counter(name, &id).absolute(value);
            }
            r.campaign_gauge(catalog::CAMPAIGN_REMAINING, &id)
                .set(e.remaining() as f64);
        }
        r.set_overflow(overflow);
    }
}

/// Reads one sample from an exposition (for tests and tools): `name{labels} value`, with the
/// labels in any order; fractional values are truncated.
pub fn sample(text: &str, series: &str) -> Option<u64> {
    crate::telemetry::exposition::sample(text, series).map(|v| v as u64)
}
