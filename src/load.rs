//! A closed-loop claim storm: C workers, each firing its next claim as soon as the last answered.
//!
//! Used by `seckill demo` (and the tests) to drive a server the way seed 000's `ab -c 20 -n 100`
//! does, recording every answer so the caller can check the invariants, and latency in an HDR
//! histogram for an `ab`-style summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use crate::bench::client::{ClaimReply, Client};
use crate::domain::ClaimAnswer;

/// One planned claim.
#[derive(Debug, Clone)]
pub struct Shot {
    pub user: String,
    pub qty: u64,
    pub key: Option<String>,
}

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
        let ms = |us: u64| us as f64 / 1000.0;
        let h = &self.latency;
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
        let _ = writeln!(
            s,
            "Time per request:       {:.3} [ms] (mean)",
            h.mean() / 1000.0
        );
        let _ = writeln!(
            s,
            "\nLatency (ms)  min {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            ms(h.min()),
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.9)),
            ms(h.value_at_quantile(0.99)),
            ms(h.value_at_quantile(0.999)),
            ms(h.max())
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

/// Fires `shots` at `campaign` with `concurrency` requests in flight.
pub async fn storm(
    client: &Client,
    campaign: &str,
    shots: Vec<Shot>,
    concurrency: usize,
) -> Report {
    let shots = Arc::new(shots);
    let next = Arc::new(AtomicUsize::new(0));
    let sink = Arc::new(Mutex::new(Report {
        elapsed: Duration::ZERO,
        concurrency,
        latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds"),
        outcomes: BTreeMap::new(),
        refused: BTreeMap::new(),
        transport_errors: 0,
        answers: Vec::with_capacity(shots.len()),
    }));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (client, campaign) = (client.clone(), campaign.to_owned());
            let (shots, next, sink) = (shots.clone(), next.clone(), sink.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(shot) = shots.get(i) else { return };
                    let t = Instant::now();
                    let reply = client
                        .claim(&campaign, &shot.user, shot.qty, shot.key.as_deref())
                        .await;
                    let us = t.elapsed().as_micros() as u64;
                    let mut r = sink.lock();
                    match reply {
                        Ok(reply) => {
                            r.latency.saturating_record(us.max(1));
                            match reply {
                                ClaimReply::Processed(a) => {
                                    *r.outcomes.entry(a.outcome.as_str()).or_default() += 1;
                                    r.answers.push((shot.clone(), a));
                                }
                                ClaimReply::Refused(status, _) => {
                                    *r.refused.entry(status.as_u16()).or_default() += 1;
                                }
                            }
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "claim request failed");
                            r.transport_errors += 1;
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.await;
    }
    let mut report = Arc::try_unwrap(sink)
        .map(Mutex::into_inner)
        .unwrap_or_else(|_| unreachable!("all workers finished"));
    report.elapsed = started.elapsed();
    report
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
