//! Webhook endpoints: each event POSTed as JSON, signed in the Standard Webhooks format
//! ([`super::sign`]). A 2xx answer ends an event's delivery; 410 Gone disables the endpoint;
//! anything else (another status, a refused connection, a timeout) is a refusal.
//!
//! Events of one order (a lane) go one after the other, each only after the previous one was
//! taken, so a receiver sees an order's transitions in their order; lanes go side by side, up
//! to `--webhook-concurrency` at once. When a batch's every attempt is refused, the endpoint
//! is down: nothing moves and the batch is sent again after a backoff. When the receiver takes
//! some events and refuses one, the refused event is **parked** in the ledger with the rest of
//! its lane behind it, and the cursor moves on: one poison event holds back its own order
//! only. A parked lane's first event is retried with the backoff of `delivery::backoff`, its
//! clock kept in the ledger (a takeover does not restart it), for up to `--webhook-max-age`;
//! then the lane's parked events become dead letters, in order, and so does every later event
//! of that order until a replay sends them.

use std::collections::HashMap;

use futures::StreamExt;

use super::backoff;
use super::runner::{Ctx, Halt};
use super::sign::Key;
use crate::domain::Event;
use crate::ledger::sinks::{Parked, Retried, SinkRow};
use crate::telemetry::catalog;

/// Checks a webhook URL: absolute `http` or `https` with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("a webhook URL is http:// or https://".into());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("a webhook URL names a host".into());
    }
    if url.len() > 2048 {
        return Err("a webhook URL is at most 2048 bytes".into());
    }
    Ok(())
}

/// One endpoint.
pub struct Webhook {
    url: String,
    key: Option<Key>,
}

/// How one attempt ended.
enum Attempt {
    Taken,
    Gone,
    /// The endpoint answered, but not 2xx.
    Failed(String),
    /// No connection at all (refused, unresolvable, TLS failed): the endpoint, not the event.
    Unreachable(String),
}

/// How a batch ended.
pub enum Batch {
    /// The receiver took events of the batch: each event taken (at these micros) or parked.
    Delivered(Vec<Fate>),
    /// Every attempt failed: the endpoint is down; nothing parked, the batch is sent again.
    Down(String),
    /// The stream holds events past this batch from another holder: this one lost its lease.
    Stale,
}

/// An event of a delivered batch.
pub enum Fate {
    Taken(i64),
    Parked(Parked),
}

/// The lanes (orders) with parked events, as the ledger last listed them (the value, whether
/// the lane is dead, is for the logs: rows parked behind a lane need no state of their own).
pub type Lanes = HashMap<String, bool>;

fn lane_of(e: &Event) -> &str {
    match &e.order {
        Some(o) => o.order_id.as_str(),
        None => e.campaign_id.as_str(),
    }
}

fn now() -> i64 {
    crate::clock::now().timestamp_micros()
}

impl Webhook {
    /// The endpoint of `sink`; an error when its stored secret does not parse (it is then
    /// disabled rather than sent unsigned).
    pub fn new(sink: &SinkRow) -> Result<Webhook, String> {
        let key = match sink.secret.as_deref() {
            Some(s) => Some(Key::parse(s).map_err(|e| format!("its secret does not parse: {e}"))?),
            None => None,
        };
        Ok(Webhook {
            url: sink.target.clone(),
            key,
        })
    }

    /// Sends a batch, one attempt per event: an order's events one after the other, stopping
    /// at its first refused event, which is parked with the ones behind it; orders side by
    /// side. An order with parked events already has this batch's events parked behind them.
    pub async fn deliver(
        &self,
        events: &[Event],
        lanes: &mut Lanes,
        ctx: &Ctx<'_>,
    ) -> Result<Batch, Halt> {
        let mut order: Vec<Vec<usize>> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            let at = *index.entry(lane_of(e)).or_insert_with(|| {
                order.push(Vec::new());
                order.len() - 1
            });
            order[at].push(i);
        }
        let bodies: Vec<String> = events
            .iter()
            .map(|e| serde_json::to_string(e).expect("an event serialises"))
            .collect();
        let park = |i: usize, state: &str, attempts: i64, error: &str| {
            let e = &events[i];
            let t = now();
            let next = match attempts {
                0 => t,
                n => t + backoff::after(n as u32, ctx.cfg().webhook_max_backoff).as_micros() as i64,
            };
            Parked {
                pos: e.cursor.parse().unwrap_or_default(),
                event_id: e.id.clone(),
                lane: lane_of(e).to_owned(),
                body: bodies[i].clone(),
                state: state.to_owned(),
                attempts,
                first_attempt_at: t,
                next_attempt_at: next,
                last_error: error.to_owned(),
            }
        };
        let mut fates: Vec<Option<Fate>> = events.iter().map(|_| None).collect();
        let mut runs = Vec::new();
        for lane in order {
            let name = lane_of(&events[lane[0]]);
            if lanes.contains_key(name) {
                for i in lane {
                    fates[i] = Some(Fate::Parked(park(i, "retrying", 0, BEHIND)));
                }
            } else {
                runs.push(lane);
            }
        }
        let (mut taken, mut failed, attempted) = (0usize, None::<String>, runs.len());
        let unreachable = &std::sync::atomic::AtomicBool::new(false);
        let concurrency = ctx.cfg().webhook_concurrency as usize;
        let mut sent = futures::stream::iter(runs.into_iter().map(|lane| {
            let bodies = &bodies;
            async move {
                let mut done = Vec::with_capacity(lane.len());
                let mut refused = None;
                for &i in &lane {
                    if refused.is_some() {
                        done.push((i, None));
                        continue;
                    }
                    let attempt = self.attempt(&events[i].id, &bodies[i], ctx).await;
                    match &attempt {
                        Attempt::Taken => done.push((i, Some(Ok(now())))),
                        Attempt::Gone => return Err(gone(&self.url)),
                        Attempt::Failed(error) | Attempt::Unreachable(error) => {
                            if matches!(attempt, Attempt::Unreachable(_)) {
                                unreachable.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            ctx.failed(error).await;
                            refused = Some(error.clone());
                            done.push((i, Some(Err(error.clone()))));
                        }
                    }
                }
                Ok::<_, Halt>(done)
            }
        }))
        .buffer_unordered(concurrency);
        let mut results = Vec::new();
        while let Some(lane) = sent.next().await {
            results.push(lane?);
        }
        drop(sent);
        for lane in results {
            for (i, r) in lane {
                fates[i] = Some(match r {
                    Some(Ok(at)) => {
                        taken += 1;
                        Fate::Taken(at)
                    }
                    Some(Err(error)) => {
                        let p = park(i, "retrying", 1, &error);
                        failed = Some(error);
                        Fate::Parked(p)
                    }
                    None => Fate::Parked(park(i, "retrying", 0, BEHIND)),
                });
            }
        }
        // Every attempt refused, on more than one order, or without an answer at all: the
        // endpoint is down. One order's events refused alone by an endpoint that answers are
        // that order's trouble: parked, as when others are taken.
        let unreachable = unreachable.load(std::sync::atomic::Ordering::Relaxed);
        if taken == 0 && (attempted > 1 || unreachable) {
            if let Some(error) = failed {
                return Ok(Batch::Down(error));
            }
        }
        let fates: Vec<Fate> = fates
            .into_iter()
            .map(|f| f.expect("every event has its fate"))
            .collect();
        for f in &fates {
            if let Fate::Parked(p) = f {
                lanes.entry(p.lane.clone()).or_insert(false);
            }
        }
        Ok(Batch::Delivered(fates))
    }

    /// Sends the first parked event of each order whose retry is due, once: taken, it is
    /// removed and the order's next parked event is due at once; refused, it waits its next
    /// backoff, or, retried for `--webhook-max-age`, its order's parked events become dead
    /// letters. `false` when the lease was lost meanwhile.
    pub async fn retry_due(
        &self,
        lanes: &mut Lanes,
        ctx: &Ctx<'_>,
    ) -> anyhow::Result<Result<bool, Halt>> {
        let store = &ctx.delivery.ledger;
        let due = store.due(ctx.sink, now(), 64).await?;
        if due.is_empty() {
            return Ok(Ok(true));
        }
        let concurrency = ctx.cfg().webhook_concurrency as usize;
        let outcomes: Vec<(Parked, Attempt)> =
            futures::stream::iter(due.into_iter().map(|p| async move {
                let a = self.attempt(&p.event_id, &p.body, ctx).await;
                (p, a)
            }))
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let mut any_taken = false;
        for (p, a) in outcomes {
            let t = now();
            let r = match a {
                Attempt::Gone => return Ok(Err(gone(&self.url))),
                Attempt::Taken => {
                    any_taken = true;
                    metrics::counter!(catalog::SINK_EVENTS, "sink" => ctx.sink.to_owned(), "outcome" => "delivered").increment(1);
                    Retried::Taken {
                        pos: p.pos,
                        lane: p.lane.clone(),
                        at: t,
                    }
                }
                Attempt::Failed(error) | Attempt::Unreachable(error) => {
                    ctx.failed(&error).await;
                    let attempts = p.attempts + 1;
                    let max_age = ctx.cfg().webhook_max_age.as_micros() as i64;
                    if t - p.first_attempt_at >= max_age {
                        tracing::warn!(sink = ctx.sink, event = %p.event_id, attempts, error, "giving up on an event: it and its order's later events are kept as dead letters");
                        metrics::counter!(catalog::SINK_EVENTS, "sink" => ctx.sink.to_owned(), "outcome" => "dead").increment(1);
                        lanes.insert(p.lane.clone(), true);
                        Retried::Dead {
                            lane: p.lane.clone(),
                            error,
                        }
                    } else {
                        let wait = backoff::after(attempts as u32, ctx.cfg().webhook_max_backoff);
                        Retried::Failed {
                            pos: p.pos,
                            attempts,
                            next_attempt_at: t + wait.as_micros() as i64,
                            error,
                        }
                    }
                }
            };
            if !store.retried(ctx.sink, ctx.fence(), &r, t).await? {
                return Ok(Ok(false));
            }
        }
        if any_taken {
            // An order whose last parked event was taken has nothing parked any more.
            *lanes = store.parked_lanes(ctx.sink).await?.into_iter().collect();
        }
        Ok(Ok(true))
    }

    async fn attempt(&self, id: &str, body: &str, ctx: &Ctx<'_>) -> Attempt {
        let ts = crate::clock::now().timestamp();
        let mut req = ctx
            .http()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string());
        if let Some(key) = &self.key {
            req = req.header("webhook-signature", key.sign(id, ts, body.as_bytes()));
        }
        match req.body(body.to_owned()).send().await {
            Ok(r) if r.status().is_success() => Attempt::Taken,
            Ok(r) if r.status() == reqwest::StatusCode::GONE => Attempt::Gone,
            Ok(r) => Attempt::Failed(format!("answered {}", r.status())),
            // Refused, unresolvable, no TLS: nothing reached the endpoint. A timeout or a
            // reset after the request went out may be this event's doing (a receiver that
            // chokes on it), so it counts as the event's failure.
            Err(e) if e.is_connect() => Attempt::Unreachable(format!("{e}")),
            Err(e) => Attempt::Failed(format!("{e}")),
        }
    }
}

/// The error of an event parked behind an earlier one of its order.
const BEHIND: &str = "waiting behind an earlier event of its order";

/// The reason an endpoint that answered 410 is disabled with.
pub fn gone(url: &str) -> Halt {
    Halt::Gone(format!(
        "{url} answered 410 Gone at {}",
        crate::clock::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    ))
}
