//! The bench report: an `ab`/`oha`-style text summary, or one JSON document (`--json`).
//!
//! Both renderings come from one [`BenchReport`] value, so the machine-readable figures that
//! `scripts/bench.sh` tabulates are exactly the ones a person reads.

use std::collections::BTreeMap;
use std::io::Write;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::events::EventRecord;
use super::scenario::Plan;
use super::verify::Violation;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            min: ms(h.min()),
            mean: h.mean() / 1000.0,
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }
}

/// One point of the latency percentile curve (the HDR plot of the HTML report).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Percentile {
    /// 0 … 100.
    pub percentile: f64,
    pub corrected_ms: f64,
    pub uncorrected_ms: f64,
}

/// Percentiles from 0 to 99.999 spaced evenly in "nines" (ten per decade), then the maximum.
pub fn percentile_curve(
    corrected: &Histogram<u64>,
    uncorrected: &Histogram<u64>,
) -> Vec<Percentile> {
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let mut curve: Vec<Percentile> = (0..=50)
        .map(|i| 1.0 - 10f64.powf(-(i as f64) / 10.0))
        .map(|q| Percentile {
            percentile: 100.0 * q,
            corrected_ms: ms(corrected, q),
            uncorrected_ms: ms(uncorrected, q),
        })
        .collect();
    curve.push(Percentile {
        percentile: 100.0,
        corrected_ms: corrected.max() as f64 / 1000.0,
        uncorrected_ms: uncorrected.max() as f64 / 1000.0,
    });
    curve
}

/// What the verification found.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// Whether the ledger settled before the drain timeout.
    pub drained: bool,
    pub drain_seconds: f64,
    pub ledger_reads: u32,
    pub orders: usize,
    pub active_units: u64,
    pub total: u64,
    pub remaining: u64,
    /// Whether the no-under-sell check applied (a qty-1 `sold_out` after the last supply change).
    pub under_sell_checked: bool,
    /// Campaigns with holds: how the confirms were answered and the orders resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holds: Option<super::payer::HoldsSummary>,
    pub violations: Vec<Violation>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub url: String,
    pub campaign: String,
    pub plan: Plan,
    /// Claims the presell phase sent (the `soldout` preset), outside the timed storm.
    pub presold: u64,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_second: f64,
    /// Processed claims (HTTP 200 with an outcome) per second.
    pub claims_per_second: f64,
    /// How `latency_ms` counts: `corrected` (closed loop, HdrHistogram correction with the
    /// per-connection mean interval) or `scheduled` (`--rate`: from each claim's scheduled send).
    pub latency_mode: &'static str,
    /// Corrected for coordinated omission (see `bench::storm`).
    pub latency_ms: Latency,
    pub latency_uncorrected_ms: Latency,
    pub outcomes: BTreeMap<String, u64>,
    pub non_2xx: BTreeMap<u16, u64>,
    pub bad_bodies: u64,
    pub transport_errors: u64,
    /// The `X-Request-Id`s of the first failed claims (no answer, a 5xx, a bad body).
    pub failed_request_ids: Vec<String>,
    /// 503s whose claim may have been processed (the server's ledger failed mid-commit).
    pub unknown_outcomes: u64,
    pub connects: u64,
    /// CPU the bench process used during the storm, in % of one core (Linux only).
    pub generator_cpu_percent: Option<f64>,
    /// CPU the server process (`--server-pid`) used during the storm, per request sent.
    pub server_cpu_us_per_claim: Option<f64>,
    pub events: Vec<EventRecord>,
    pub verification: Option<Verification>,
    /// The latency percentile curve (for plots).
    pub latency_percentiles: Vec<Percentile>,
    /// Cumulative counters sampled during the storm (for plots).
    pub timeline: Vec<super::timeline::Sample>,
    /// Every `won` answer received (for callers that check the ledger themselves).
    #[serde(skip)]
    pub wins: Vec<super::Win>,
    /// Every answer to a claim sent with an Idempotency-Key (for the same callers).
    #[serde(skip)]
    pub keyed: Vec<super::storm::Keyed>,
    /// Keyed claims without a claim answer (for the same callers).
    #[serde(skip)]
    pub keyed_uncertain: Vec<(String, String, std::time::Instant)>,
    /// Held orders a confirm of which was answered 200 (for the same callers).
    #[serde(skip)]
    pub confirmed: std::collections::HashSet<String>,
    /// When the confirm answered 200 of each of those was sent and when its answer arrived.
    #[serde(skip)]
    pub confirmed_at: std::collections::HashMap<String, (std::time::Instant, std::time::Instant)>,
    /// The order each of those 200s returned.
    #[serde(skip)]
    pub confirmed_for: std::collections::HashMap<String, super::payer::Returned>,
    /// When the last qty-1 claim answered `sold_out` was sent.
    #[serde(skip)]
    pub last_sold_out_sent: Option<std::time::Instant>,
}

impl Verification {
    /// What the verifier read (`drained`) and found.
    pub fn of(
        drained: &super::drain::Drained,
        under_sell_checked: bool,
        holds: Option<super::payer::HoldsSummary>,
        violations: Vec<Violation>,
    ) -> Self {
        Self {
            drained: drained.settled,
            drain_seconds: drained.waited.as_secs_f64(),
            ledger_reads: drained.reads,
            orders: drained.orders.len(),
            active_units: drained
                .orders
                .iter()
                .filter(|o| o.state.is_live())
                .map(|o| o.qty)
                .sum(),
            total: drained.view.total,
            remaining: drained.view.remaining,
            under_sell_checked,
            holds,
            violations,
        }
    }

    /// "ledger drained after 1.20s (3 reads): 10 orders, …": what the verifier read, as the text
    /// and HTML reports both say it.
    pub fn ledger_summary(&self) -> String {
        format!(
            "ledger {} after {:.2}s ({} reads): {} orders, {} active units, total {}, \
             remaining {}{}",
            if self.drained {
                "drained"
            } else {
                "NOT drained (timeout)"
            },
            self.drain_seconds,
            self.ledger_reads,
            self.orders,
            self.active_units,
            self.total,
            self.remaining,
            if self.under_sell_checked {
                ", sold out (no-under-sell checked)"
            } else {
                ""
            }
        )
    }
}

impl BenchReport {
    /// True when verification ran and found nothing.
    pub fn clean(&self) -> bool {
        match &self.verification {
            None => true,
            Some(v) => v.violations.is_empty(),
        }
    }

    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }

    pub fn write_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(out, "seckill bench: {}", self.plan.describe())?;
        writeln!(
            out,
            "Target:                 {} campaign {}",
            self.url, self.campaign
        )?;
        if self.presold > 0 {
            writeln!(
                out,
                "Presold:                {} claims before the storm",
                self.presold
            )?;
        }
        writeln!(out)?;
        writeln!(out, "Concurrency Level:      {}", self.plan.connections)?;
        writeln!(out, "Time taken for tests:   {:.3} seconds", self.seconds)?;
        writeln!(out, "Requests:               {}", self.requests)?;
        writeln!(
            out,
            "Requests per second:    {:.2} [#/sec] (claims processed: {:.2}/s)",
            self.requests_per_second, self.claims_per_second
        )?;
        writeln!(
            out,
            "Non-2xx responses:      {}",
            self.non_2xx.values().sum::<u64>()
        )?;
        writeln!(out, "Transport errors:       {}", self.transport_errors)?;
        if !self.failed_request_ids.is_empty() {
            writeln!(
                out,
                "Failed request ids:     {} (X-Request-Id, in the server's log)",
                self.failed_request_ids.join(" ")
            )?;
        }
        if self.unknown_outcomes > 0 {
            writeln!(out, "Outcome unknown (503):  {}", self.unknown_outcomes)?;
        }
        if let Some(cpu) = self.generator_cpu_percent {
            writeln!(out, "Generator CPU:          {cpu:.0}% of one core")?;
        }
        if let Some(us) = self.server_cpu_us_per_claim {
            writeln!(out, "Server CPU per claim:   {us:.1} µs")?;
        }
        let l = &self.latency_ms;
        let mode = if self.plan.rate.is_some() {
            "from scheduled send"
        } else {
            "corrected for coordinated omission"
        };
        writeln!(out, "\nLatency (ms, {mode}):")?;
        writeln!(
            out,
            "  min {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  mean {:.3}",
            l.min, l.p50, l.p90, l.p99, l.p999, l.max, l.mean
        )?;
        if self.plan.rate.is_none() {
            let u = &self.latency_uncorrected_ms;
            writeln!(
                out,
                "  uncorrected: p50 {:.3}  p99 {:.3}  p99.9 {:.3}",
                u.p50, u.p99, u.p999
            )?;
        }
        writeln!(out, "\nOutcomes:")?;
        for (k, v) in &self.outcomes {
            writeln!(out, "  {k:<16} {v}")?;
        }
        for (k, v) in &self.non_2xx {
            writeln!(out, "  HTTP {k:<11} {v}")?;
        }
        if self.bad_bodies > 0 {
            writeln!(out, "  unreadable 200  {}", self.bad_bodies)?;
        }
        if !self.events.is_empty() {
            writeln!(out, "\nEvents:")?;
            for e in &self.events {
                let at = e.sent_s.map(|s| format!("{s:.3}s")).unwrap_or("-".into());
                writeln!(
                    out,
                    "  {:>8}  {:<22} {} {}",
                    at,
                    format!("{:?}", e.spec.action),
                    if e.ok { "ok" } else { "FAILED" },
                    e.detail
                )?;
            }
        }
        self.write_verification(out)
    }

    fn write_verification(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let Some(v) = &self.verification else {
            return writeln!(out, "\nVerification: skipped (--no-verify)");
        };
        writeln!(out, "\nVerification: {}", v.ledger_summary())?;
        if let Some(h) = &v.holds {
            writeln!(
                out,
                "holds: {} confirmed, {} expired; confirms answered 200 {} / 409 {} / failed {}",
                h.confirmed,
                h.expired,
                h.confirm_answered_200,
                h.confirm_answered_409,
                h.confirm_failed
            )?;
        }
        if v.violations.is_empty() {
            return writeln!(out, "OK: every invariant holds");
        }
        writeln!(out, "FAILED: {} violation(s)", v.violations.len())?;
        for x in &v.violations {
            writeln!(
                out,
                "  [invariant {}] {:?}: {}",
                x.invariant.number(),
                x.invariant,
                x.message
            )?;
            const SHOWN: usize = 20;
            if !x.orders.is_empty() {
                let more = x.orders.len().saturating_sub(SHOWN);
                writeln!(
                    out,
                    "      orders: {}{}",
                    x.orders[..x.orders.len().min(SHOWN)].join(", "),
                    if more > 0 {
                        format!(" … and {more} more")
                    } else {
                        String::new()
                    }
                )?;
            }
        }
        Ok(())
    }
}
