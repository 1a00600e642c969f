//! A fixed list of claims fired through the bench storm: `seckill demo` and the tests.
//!
//! The demo (seed 000's `ab -c 20 -n 100`) and the integration tests need exactly the claims
//! they planned, every answer back to check their invariants, and an `ab`-style summary. They
//! get it from the same storm the bench uses (one keep-alive connection per worker, HDR
//! latency), so seckill has one load generator to trust and to keep fast.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::client::Client;
use super::conn::Endpoint;
use super::report::Latency;
use super::scenario::Stop;
use super::storm::{self, Live, StormConfig};
pub use super::users::Shot;
use super::users::Shots;
use crate::domain::ClaimAnswer;

/// Everything a storm observed.
#[derive(Debug)]
pub struct Report {
    pub elapsed: Duration,
    pub concurrency: usize,
    /// Latency in microseconds of every answered request.
    pub latency: Histogram<u64>,
    /// Processed claims by outcome name.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Refused requests by HTTP status.
    pub refused: BTreeMap<u16, u64>,
    /// The body of the first refusal of each status.
    pub refusal_bodies: BTreeMap<u16, String>,
    pub transport_errors: u64,
    /// Every processed answer with the shot that produced it.
    pub answers: Vec<(Shot, ClaimAnswer)>,
}

impl Report {
    pub fn requests(&self) -> u64 {
        self.latency.len() + self.transport_errors
    }

    pub fn count(&self, outcome: &str) -> u64 {
        self.outcomes.get(outcome).copied().unwrap_or(0)
    }

    /// An `ab`-style summary.
    pub fn summary(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        let l = Latency::of(&self.latency);
        let mut s = String::new();
        let _ = writeln!(s, "Concurrency Level:      {}", self.concurrency);
        let _ = writeln!(s, "Time taken for tests:   {secs:.3} seconds");
        let _ = writeln!(s, "Complete requests:      {}", self.latency.len());
        let _ = writeln!(s, "Failed requests:        {}", self.transport_errors);
        let _ = writeln!(
            s,
            "Requests per second:    {:.2} [#/sec] (mean)",
            self.requests() as f64 / secs.max(1e-9)
        );
        let _ = writeln!(s, "Time per request:       {:.3} [ms] (mean)", l.mean);
        let _ = writeln!(
            s,
            "\nLatency (ms)  min {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            l.min, l.p50, l.p90, l.p99, l.p999, l.max
        );
        let _ = writeln!(s, "\nOutcomes:");
        for (k, v) in &self.outcomes {
            let _ = writeln!(s, "  {k:<16} {v}");
        }
        for (k, v) in &self.refused {
            let _ = writeln!(s, "  HTTP {k:<11} {v}");
        }
        s
    }
}

/// Fires `shots` at `campaign` of the server `client` talks to, `concurrency` connections each
/// with one claim in flight, and returns once every shot was answered or failed.
///
/// # Panics
/// If the client's base URL is not a plain `http://host:port` URL (the demo and tests only
/// ever use the URL of a server they started).
pub async fn storm(
    client: &Client,
    campaign: &str,
    shots: Vec<Shot>,
    concurrency: usize,
) -> Report {
    let endpoint = Endpoint::resolve(&client.url(""))
        .await
        .expect("the client's base URL is a plain http:// URL");
    let n = shots.len() as u64;
    let concurrency = concurrency.max(1);
    let cfg = StormConfig {
        claim_path: format!("/v1/campaigns/{campaign}/claims"),
        shots: Shots::list(shots),
        connections: concurrency.min(n.max(1) as usize),
        stop: Stop::Requests(n),
        rate: None,
        timeout: Duration::from_secs(60),
        keep_keyed: false,
        keep_answers: true,
    };
    let result = storm::run(cfg, &[endpoint], Live::new(false)).await;
    let t = result.tally;
    Report {
        elapsed: result.elapsed,
        concurrency,
        latency: t.latency,
        outcomes: t.outcomes,
        refused: t.refused,
        refusal_bodies: t.refusal_bodies,
        transport_errors: t.transport_errors,
        answers: t.answers,
    }
}

/// One shot per distinct user `u1 … uN`, qty 1.
pub fn distinct_users(n: usize) -> Vec<Shot> {
    (1..=n)
        .map(|i| Shot {
            user: format!("u{i}"),
            qty: 1,
            key: None,
        })
        .collect()
}
