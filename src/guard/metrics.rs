//! Guard counters and their Prometheus text exposition (`GET /metrics`, admin only).
//!
//! A handful of atomics rendered by hand: the guard needs counters, not a metrics framework,
//! and per-campaign series exist only for campaigns on the stock board, so clients cannot mint
//! new series by sending made-up campaign ids.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::soldout::StockBoard;

#[derive(Debug, Default)]
pub struct GuardMetrics {
    /// Claims that reached the engine, all campaigns (unknown ids included).
    pub engine_claims: AtomicU64,
    pub rate_limited_user: AtomicU64,
    pub rate_limited_ip: AtomicU64,
    pub rate_limited_capacity: AtomicU64,
    pub shed: AtomicU64,
    pub timeouts: AtomicU64,
    pub identity_refused: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl GuardMetrics {
    pub fn rate_limited(&self, label: &str) {
        match label {
            "capacity" => bump(&self.rate_limited_capacity),
            l if l.ends_with("user") => bump(&self.rate_limited_user),
            _ => bump(&self.rate_limited_ip),
        }
    }

    pub fn render(&self, board: &StockBoard, in_flight: usize) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut s = String::new();
        family(
            &mut s,
            "seckill_engine_claims_total",
            "counter",
            "Claims handed to the engine (all campaigns)",
        );
        let _ = writeln!(
            s,
            "seckill_engine_claims_total {}",
            get(&self.engine_claims)
        );
        family(
            &mut s,
            "seckill_rate_limited_total",
            "counter",
            "Claims refused 429 by a rate limit",
        );
        for (who, c) in [
            ("user", &self.rate_limited_user),
            ("ip", &self.rate_limited_ip),
            ("capacity", &self.rate_limited_capacity),
        ] {
            let _ = writeln!(
                s,
                "seckill_rate_limited_total{{subject=\"{who}\"}} {}",
                get(c)
            );
        }
        for (name, help, c) in [
            (
                "seckill_shed_total",
                "Requests refused 503 by the in-flight bound",
                &self.shed,
            ),
            (
                "seckill_timeouts_total",
                "Requests answered 503 by the request timeout",
                &self.timeouts,
            ),
            (
                "seckill_identity_refused_total",
                "Claims refused 401 for their identity token",
                &self.identity_refused,
            ),
        ] {
            family(&mut s, name, "counter", help);
            let _ = writeln!(s, "{name} {}", get(c));
        }
        family(
            &mut s,
            "seckill_in_flight",
            "gauge",
            "Public requests in flight",
        );
        let _ = writeln!(s, "seckill_in_flight {in_flight}");
        let campaigns = board.all();
        let series: [(&str, &str, Pick); 3] = [
            (
                "seckill_campaign_engine_claims_total",
                "Claims of the campaign handed to the engine",
                |c| &c.engine_claims,
            ),
            (
                "seckill_campaign_fast_sold_out_total",
                "Claims answered sold_out from memory",
                |c| &c.fast_sold_out,
            ),
            (
                "seckill_campaign_admission_refused_total",
                "Claims refused by the admission gate",
                |c| &c.admission_refused,
            ),
        ];
        for (name, help, pick) in series {
            family(&mut s, name, "counter", help);
            for (id, e) in &campaigns {
                let _ = writeln!(s, "{name}{{campaign=\"{id}\"}} {}", get(pick(&e.counters)));
            }
        }
        family(
            &mut s,
            "seckill_campaign_remaining",
            "gauge",
            "Remaining stock as the guard sees it",
        );
        for (id, e) in &campaigns {
            let _ = writeln!(
                s,
                "seckill_campaign_remaining{{campaign=\"{id}\"}} {}",
                e.remaining()
            );
        }
        s
    }
}

/// Selects one counter of a campaign.
type Pick = fn(&super::soldout::CampaignCounters) -> &AtomicU64;

fn family(s: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Reads one sample from an exposition (for tests and tools): `name{labels} value`.
pub fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
