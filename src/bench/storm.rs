//! The claim storm: C connections firing claims, closed-loop or at a constant rate.
//!
//! Each worker owns one keep-alive connection and its own tally (histogram, counts, wins), so
//! the hot loop shares nothing but two atomic counters; tallies merge once at the end.
//!
//! Coordinated omission. In the default closed loop a stalled answer also delays the requests
//! that connection would have sent meanwhile, so raw latencies understate the tail. The report
//! therefore uses HdrHistogram's correction with the expected interval = the mean time one
//! connection took per request over the run (C / achieved rate): a stall of k intervals adds
//! the k samples that would have waited behind it. With `--rate R` shot `i` is scheduled at
//! `start + i/R` and its latency counts from that scheduled time, which needs no correction.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use parking_lot::Mutex;

use super::conn::{Conn, Endpoint};
use super::scenario::Stop;
use super::users::{Shot, Shots};
use crate::domain::{ClaimAnswer, Outcome};

/// A `won` answer, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Win {
    pub user: String,
    pub order_id: String,
    pub qty: u64,
    pub codes: Option<Vec<String>>,
    pub key: Option<String>,
    /// When the claim was sent and its answer arrived (the fault campaign excuses wins a Redis
    /// restore took back).
    pub sent: Instant,
    pub answered: Instant,
}

/// A processed answer to a claim sent with an Idempotency-Key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    pub user: String,
    pub key: String,
    pub outcome: Outcome,
    pub order_id: Option<String>,
    /// When the claim was sent and when its answer arrived.
    pub sent: Instant,
    pub answered: Instant,
}

/// What the workers observed.
#[derive(Debug)]
pub struct Tally {
    /// Microseconds from send (or scheduled send) to the whole answer, answered requests only.
    pub latency: Histogram<u64>,
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Answers other than 200, by status.
    pub refused: BTreeMap<u16, u64>,
    /// 200 answers whose body was not a claim answer.
    pub bad_bodies: u64,
    /// Requests with no HTTP answer (connect error, reset, timeout): their fate is unknown.
    pub transport_errors: u64,
    /// 503s that said the claim may have been processed (`"outcome": "unknown"`).
    pub unknown_outcomes: u64,
    pub wins: Vec<Win>,
    pub keyed: Vec<Keyed>,
    /// Keyed claims without a claim answer (no answer, or a refusal such as a 503), as (user,
    /// key, sent): each may have been decided and kept without the bench knowing, or have held
    /// a place under the server's cap on kept rejections while it was tried.
    pub keyed_uncertain: Vec<(String, String, Instant)>,
    /// Every processed answer with its shot (only with [`StormConfig::keep_answers`]).
    pub answers: Vec<(Shot, ClaimAnswer)>,
    /// Send time of the latest qty-1 claim answered `sold_out`.
    pub last_sold_out_sent: Option<Instant>,
    pub connects: u64,
    /// The `X-Request-Id`s of the first [`FAILED_IDS`] claims that failed (no answer, a 5xx,
    /// a body that was not a claim answer): what to look up in the server's log.
    pub failed_ids: Vec<String>,
    /// The body of the first refusal of each status: what a report of refusals shows.
    pub refusal_bodies: BTreeMap<u16, String>,
}

/// How many failed requests' ids a report lists.
pub const FAILED_IDS: usize = 20;

/// The `X-Request-Id` of a storm's `i`-th claim: the storm's random prefix and `i`, so a
/// failed claim's id is known even when no answer came back.
fn request_id(run: &str, i: u64) -> String {
    format!("{run}-{i}")
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

impl Tally {
    fn new() -> Self {
        Self {
            latency: histogram(),
            outcomes: BTreeMap::new(),
            refused: BTreeMap::new(),
            bad_bodies: 0,
            transport_errors: 0,
            unknown_outcomes: 0,
            wins: Vec::new(),
            keyed: Vec::new(),
            keyed_uncertain: Vec::new(),
            answers: Vec::new(),
            last_sold_out_sent: None,
            connects: 0,
            failed_ids: Vec::new(),
            refusal_bodies: BTreeMap::new(),
        }
    }

    fn failed(&mut self, id: String) {
        if self.failed_ids.len() < FAILED_IDS {
            self.failed_ids.push(id);
        }
    }

    /// Records a keyed claim that got no claim answer (see [`Tally::keyed_uncertain`]).
    fn unanswered_key(&mut self, shot: &Shot, keep_keyed: bool, sent: Instant) {
        if let Some(k) = shot.key.as_ref().filter(|_| keep_keyed) {
            self.keyed_uncertain
                .push((shot.user.clone(), k.clone(), sent));
        }
    }

    fn merge(&mut self, o: Tally) {
        let _ = self.latency.add(&o.latency);
        for (k, v) in o.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        for (k, v) in o.refused {
            *self.refused.entry(k).or_default() += v;
        }
        self.bad_bodies += o.bad_bodies;
        self.transport_errors += o.transport_errors;
        self.unknown_outcomes += o.unknown_outcomes;
        self.wins.extend(o.wins);
        self.keyed.extend(o.keyed);
        self.keyed_uncertain.extend(o.keyed_uncertain);
        self.answers.extend(o.answers);
        self.last_sold_out_sent = self.last_sold_out_sent.max(o.last_sold_out_sent);
        self.connects += o.connects;
        for (k, v) in o.refusal_bodies {
            self.refusal_bodies.entry(k).or_insert(v);
        }
        for id in o.failed_ids {
            self.failed(id);
        }
    }

    /// Requests sent, answered or not.
    pub fn requests(&self) -> u64 {
        self.latency.len() + self.transport_errors
    }

    pub fn count(&self, outcome: &str) -> u64 {
        self.outcomes.get(outcome).copied().unwrap_or(0)
    }
}

/// Counters the progress line and the events read while the storm runs.
pub struct Live {
    pub started: Instant,
    /// This storm's prefix of its claims' `X-Request-Id`s (two storms of one process, say
    /// against two instances at once, never share one).
    run: String,
    next: AtomicU64,
    pub done: AtomicU64,
    pub won: AtomicU64,
    pub errors: AtomicU64,
    pub finished: AtomicBool,
    /// Order ids won and not yet handed to a cancel event (kept only if one is planned).
    recent_wins: Option<Mutex<Vec<String>>>,
}

impl Live {
    pub fn new(keep_wins: bool) -> Arc<Self> {
        Arc::new(Self {
            started: Instant::now(),
            run: format!("bench-{}", hex::encode(rand::random::<[u8; 6]>())),
            next: AtomicU64::new(0),
            done: AtomicU64::new(0),
            won: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            recent_wins: keep_wins.then(|| Mutex::new(Vec::new())),
        })
    }

    /// Up to `n` order ids won so far, the newest first; each is handed out once.
    pub fn take_recent_wins(&self, n: usize) -> Vec<String> {
        let Some(w) = &self.recent_wins else {
            return Vec::new();
        };
        let mut w = w.lock();
        let keep = w.len().saturating_sub(n);
        let mut taken = w.split_off(keep);
        taken.reverse();
        taken
    }
}

/// How the storm runs.
#[derive(Debug, Clone)]
pub struct StormConfig {
    /// Path of the claim route, below each endpoint's base path.
    pub claim_path: String,
    pub shots: Shots,
    pub connections: usize,
    pub stop: Stop,
    pub rate: Option<f64>,
    pub timeout: Duration,
    pub keep_keyed: bool,
    /// Keep every processed answer with its shot (small runs: the demo and the tests).
    pub keep_answers: bool,
}

pub struct StormResult {
    pub tally: Tally,
    pub elapsed: Duration,
}

/// Most connects in progress at once while the storm ramps up. Ten thousand simultaneous SYNs
/// overflow the kernel's SYN backlog (2048 by default) and the server then resets some of the
/// connections after their request was sent, so the claim's fate would be unknown.
const CONNECTS_AT_ONCE: usize = 128;

/// Fires the storm, spreading the connections round-robin over `endpoints` (instances of one
/// deployment); returns once every worker has stopped.
pub async fn run(cfg: StormConfig, endpoints: &[Endpoint], live: Arc<Live>) -> StormResult {
    let cfg = Arc::new(cfg);
    let ramp = Arc::new(tokio::sync::Semaphore::new(CONNECTS_AT_ONCE));
    let workers: Vec<_> = (0..cfg.connections)
        .map(|i| {
            let (cfg, live, ramp) = (cfg.clone(), live.clone(), ramp.clone());
            let endpoint = endpoints[i % endpoints.len()].clone();
            let path = endpoint.path(&cfg.claim_path);
            tokio::spawn(async move {
                let mut conn = Conn::new(endpoint);
                if let Ok(_permit) = ramp.acquire().await {
                    // A failed connect is retried, and counted, by the first request.
                    let _ = conn.open().await;
                }
                worker(cfg, conn, path, live).await
            })
        })
        .collect();
    let mut tally = Tally::new();
    for w in workers {
        match w.await {
            Ok(t) => tally.merge(t),
            Err(e) => tracing::error!(error = %e, "a bench worker panicked"),
        }
    }
    live.finished.store(true, Ordering::Release);
    StormResult {
        tally,
        elapsed: live.started.elapsed(),
    }
}

async fn worker(cfg: Arc<StormConfig>, mut conn: Conn, path: String, live: Arc<Live>) -> Tally {
    let mut t = Tally::new();
    let deadline = match cfg.stop {
        Stop::Duration(d) => Some(live.started + d),
        Stop::Requests(_) => None,
    };
    loop {
        let i = live.next.fetch_add(1, Ordering::Relaxed);
        if let Stop::Requests(n) = cfg.stop {
            if i >= n {
                break;
            }
        }
        let scheduled = cfg
            .rate
            .map(|r| live.started + Duration::from_secs_f64(i as f64 / r));
        if let Some(at) = scheduled {
            if deadline.is_some_and(|d| at >= d) {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
        } else if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let shot = cfg.shots.get(i);
        let body = Bytes::from(format!(
            r#"{{"user_id":"{}","qty":{}}}"#,
            shot.user, shot.qty
        ));
        let sent = Instant::now();
        let id = request_id(&live.run, i);
        let reply = conn
            .post_json(&path, body, shot.key.as_deref(), Some(&id), cfg.timeout)
            .await;
        let latency = scheduled.unwrap_or(sent).elapsed();
        live.done.fetch_add(1, Ordering::Relaxed);
        let resp = match reply {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "claim request failed");
                t.transport_errors += 1;
                t.failed(id);
                live.errors.fetch_add(1, Ordering::Relaxed);
                t.unanswered_key(&shot, cfg.keep_keyed, sent);
                // A refused connect fails at once: do not spin on a server that is down.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        t.latency
            .saturating_record((latency.as_micros() as u64).max(1));
        if resp.status != hyper::StatusCode::OK {
            *t.refused.entry(resp.status.as_u16()).or_default() += 1;
            t.refusal_bodies
                .entry(resp.status.as_u16())
                .or_insert_with(|| String::from_utf8_lossy(&resp.body).into_owned());
            live.errors.fetch_add(1, Ordering::Relaxed);
            if says_outcome_unknown(&resp.body) {
                t.unknown_outcomes += 1;
            }
            if resp.status.is_server_error() {
                t.failed(id);
            }
            // Even a 503 that changed nothing held a place under the server's cap on kept
            // rejections while its commit was tried (docs/API.md), so it counts toward it.
            t.unanswered_key(&shot, cfg.keep_keyed, sent);
            continue;
        }
        let Ok(answer) = serde_json::from_slice::<ClaimAnswer>(&resp.body) else {
            t.bad_bodies += 1;
            t.failed(id);
            live.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        *t.outcomes.entry(answer.outcome.as_str()).or_default() += 1;
        if answer.outcome == Outcome::SoldOut && shot.qty == 1 {
            t.last_sold_out_sent = t.last_sold_out_sent.max(Some(sent));
        }
        if cfg.keep_answers {
            t.answers.push((shot.clone(), answer.clone()));
        }
        if cfg.keep_keyed {
            if let Some(k) = &shot.key {
                t.keyed.push(Keyed {
                    user: shot.user.clone(),
                    key: k.clone(),
                    outcome: answer.outcome,
                    order_id: answer.order_id.clone(),
                    sent,
                    answered: Instant::now(),
                });
            }
        }
        if answer.outcome == Outcome::Won {
            live.won.fetch_add(1, Ordering::Relaxed);
            let order_id = answer.order_id.unwrap_or_default();
            if let Some(w) = &live.recent_wins {
                w.lock().push(order_id.clone());
            }
            t.wins.push(Win {
                user: shot.user,
                order_id,
                qty: answer.qty.unwrap_or(0),
                codes: answer.codes,
                key: shot.key,
                sent,
                answered: Instant::now(),
            });
        }
    }
    t.connects = conn.reconnects;
    t
}

/// Latency corrected for coordinated omission (closed loop), per the module docs.
pub fn corrected(
    tally: &Tally,
    elapsed: Duration,
    connections: usize,
    rate: bool,
) -> Histogram<u64> {
    let answered = tally.latency.len();
    if rate || answered == 0 {
        return tally.latency.clone();
    }
    let interval_us = elapsed.as_micros() as u64 * connections as u64 / answered;
    tally.latency.clone_correct(interval_us.max(1))
}

/// True for an error body that says the request may have taken effect.
fn says_outcome_unknown(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v["error"]["outcome"] == "unknown")
}
