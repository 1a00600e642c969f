//! One sink's delivery loop: take the lease, read the feed after the cursor, deliver a batch,
//! move the cursor under the fence, again. A lost lease (another instance took the sink over,
//! or this one could not renew it in time) ends the loop at once; the cursor then belongs to
//! the new holder, which starts after the last batch this one recorded.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{lease, nats, webhook, Delivery, BATCH, FLUSH, LEASE, RENEW};
use crate::domain::{Error, Event, EventFilter};
use crate::ledger::sinks::{Progress, SinkKind, SinkRow};
use crate::telemetry::catalog;
use webhook::{Batch, Fate};

/// Why a sink stops being delivered.
#[derive(Debug)]
pub enum Halt {
    /// The endpoint answered 410 Gone: disabled, with this reason.
    Gone(String),
}

/// What a target reports while it delivers: failed attempts, in the ledger and the metrics.
pub struct Ctx<'a> {
    pub delivery: &'a Delivery,
    pub sink: &'a str,
    fence: i64,
}

impl Ctx<'_> {
    pub fn cfg(&self) -> &crate::config::DeliveryArgs {
        &self.delivery.cfg
    }

    pub fn fence(&self) -> i64 {
        self.fence
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.delivery.http
    }

    /// Notes a failed attempt (the event will be tried again).
    pub async fn failed(&self, error: &str) {
        metrics::counter!(catalog::SINK_EVENTS, "sink" => self.sink.to_owned(), "outcome" => "failed")
            .increment(1);
        let now = crate::clock::now().timestamp_micros();
        if let Err(e) = self
            .delivery
            .ledger
            .failed(self.sink, self.fence, error, now)
            .await
        {
            tracing::warn!(sink = self.sink, error = %format!("{e:#}"), "recording a failed delivery failed");
        }
    }
}

enum Exit {
    /// The sink is gone or disabled.
    Stop,
    /// The lease was lost: wait for it again.
    Lost,
}

/// Delivers `sink` until it is removed or disabled.
pub(super) async fn run(d: Arc<Delivery>, sink: SinkRow) {
    loop {
        match run_leased(&d, &sink.id).await {
            Ok(Exit::Stop) => return,
            Ok(Exit::Lost) => {
                tracing::info!(sink = %sink.id, "no longer delivering this sink: its lease was lost");
            }
            Err(e) => {
                tracing::warn!(sink = %sink.id, error = %format!("{e:#}"), "delivering a sink failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        metrics::gauge!(catalog::SINK_HOLDER, "sink" => sink.id.clone()).set(0.0);
    }
}

enum Target {
    Webhook(webhook::Webhook),
    Nats(Box<nats::Nats>),
}

async fn run_leased(d: &Arc<Delivery>, id: &str) -> anyhow::Result<Exit> {
    let (fence, mut cursor, taken_at) = loop {
        let now = crate::clock::now().timestamp_micros();
        let issued = Instant::now();
        if let Some((fence, cursor)) = d.ledger.lease(id, &d.owner, now, LEASE).await? {
            break (fence, cursor, issued);
        }
        match d.ledger.sink(id).await? {
            Some(s) if s.enabled == 1 => tokio::time::sleep(RENEW).await,
            _ => return Ok(Exit::Stop),
        }
    };
    // The row as it is now: a secret or URL changed since this task started applies.
    let Some(sink) = d.ledger.sink(id).await? else {
        return Ok(Exit::Stop);
    };
    let mut target = match sink.kind() {
        SinkKind::Webhook => match webhook::Webhook::new(&sink) {
            Ok(w) => Target::Webhook(w),
            Err(reason) => return disable(d, id, &reason).await,
        },
        SinkKind::Nats => Target::Nats(Box::new(nats::Nats::new(&sink, &d.cfg.nats_stream))),
    };
    let target = &mut target;
    tracing::info!(sink = id, fence, cursor, "delivering this sink");
    let labels = [("sink", id.to_owned())];
    metrics::gauge!(catalog::SINK_HOLDER, &labels).set(1.0);
    metrics::gauge!(catalog::SINK_ENABLED, &labels).set(1.0);
    let (lost_tx, lost) = watch::channel(false);
    let _keeper = lease::KeepLease(tokio::spawn(lease::keep(
        d.clone(),
        id.to_owned(),
        fence,
        taken_at + LEASE,
        lost_tx,
    )));
    let ctx = Ctx {
        delivery: d,
        sink: id,
        fence,
    };
    if let Target::Nats(n) = target {
        let head = d.feed.head().await?;
        if let Some(acked) = n.resume(head, &ctx).await? {
            if acked > cursor {
                tracing::info!(
                    sink = id,
                    from = cursor,
                    to = acked,
                    "the stream already holds events after the cursor; resuming after them"
                );
                let p = Progress {
                    cursor: acked,
                    ..Progress::default()
                };
                if !d.ledger.advance(id, fence, &p).await? {
                    return Ok(Exit::Lost);
                }
                cursor = acked;
            }
        }
    }
    let mut lanes: webhook::Lanes = d.ledger.parked_lanes(id).await?.into_iter().collect();
    let mut down: u32 = 0;
    // Since when every batch failed (this holder's view): past --webhook-max-age, disabled.
    let mut down_since: Option<Instant> = None;
    // Whether `pending` holds progress the ledger has not.
    let mut dirty = false;
    // Delivered batches not yet written to the ledger (see FLUSH).
    let mut pending = Progress {
        cursor,
        ..Progress::default()
    };
    let mut flushed = Instant::now();
    loop {
        if *lost.borrow() {
            return Ok(Exit::Lost);
        }
        // While the endpoint is down, parked orders wait too: their clocks must not run out
        // on an outage that is the endpoint's, not theirs.
        if let (Target::Webhook(w), None) = (&mut *target, down_since) {
            let mut lost_wait = lost.clone();
            let retried = tokio::select! {
                r = w.retry_due(&mut lanes, &ctx) => r?,
                _ = lost_wait.wait_for(|l| *l) => return Ok(Exit::Lost),
            };
            match retried {
                Ok(true) => {}
                Ok(false) => return Ok(Exit::Lost),
                Err(Halt::Gone(reason)) => return disable(d, id, &reason).await,
            }
        }
        let filter = EventFilter {
            after: Some(cursor),
            limit: BATCH,
            campaign: None,
            kind: None,
            wait_ms: if down > 0 { 0 } else { 1000 },
        };
        let events = match d.feed.page(&filter).await {
            Ok(page) => page.events,
            Err(Error::Gone(_)) => {
                let pruned = d.feed.pruned_through().await?;
                tracing::error!(
                    sink = id,
                    from = cursor,
                    to = pruned,
                    "retention removed events this sink had not received; they are lost to it"
                );
                metrics::counter!(catalog::SINK_EVENTS, "sink" => id.to_owned(), "outcome" => "lost")
                    .increment(pruned - cursor);
                pending.cursor = pruned;
                pending.lost += pruned - cursor;
                if !flush(d, id, fence, &mut pending).await? {
                    return Ok(Exit::Lost);
                }
                dirty = false;
                cursor = pruned;
                continue;
            }
            Err(e) => anyhow::bail!("reading the feed: {e}"),
        };
        let Some(last) = events.last() else {
            if dirty {
                if !flush(d, id, fence, &mut pending).await? {
                    return Ok(Exit::Lost);
                }
                dirty = false;
                flushed = Instant::now();
            }
            metrics::gauge!(catalog::SINK_BACKLOG, &labels).set(0.0);
            continue;
        };
        let next: u64 = last.cursor.parse()?;
        let mut lost_wait = lost.clone();
        let sent = tokio::select! {
            o = deliver(target, &events, &mut lanes, &ctx) => o,
            _ = lost_wait.wait_for(|l| *l) => return Ok(Exit::Lost),
        };
        let fates = match sent {
            Ok(Batch::Delivered(fates)) => fates,
            Ok(Batch::Stale) => return Ok(Exit::Lost),
            Ok(Batch::Down(error)) => {
                down += 1;
                let since = *down_since.get_or_insert_with(Instant::now);
                // What earlier batches delivered is written before waiting.
                if !flush(d, id, fence, &mut pending).await? {
                    return Ok(Exit::Lost);
                }
                dirty = false;
                if since.elapsed() >= d.cfg.webhook_max_age {
                    let reason = format!(
                        "every delivery failed for --webhook-max-age ({:?}); last error: {error}",
                        d.cfg.webhook_max_age
                    );
                    return disable(d, id, &reason).await;
                }
                let wait = super::backoff::after(down, d.cfg.webhook_max_backoff);
                let mut lost_wait = lost.clone();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = lost_wait.wait_for(|l| *l) => return Ok(Exit::Lost),
                }
                continue;
            }
            Err(Halt::Gone(reason)) => return disable(d, id, &reason).await,
        };
        down = 0;
        down_since = None;
        dirty = true;
        pending.cursor = next;
        for (event, fate) in events.iter().zip(fates) {
            match fate {
                Fate::Taken(at) => {
                    pending.delivered += 1;
                    pending.delivered_at = Some(pending.delivered_at.unwrap_or(at).max(at));
                    let lag = (at - event.at.timestamp_micros()).max(0) as f64 / 1e6;
                    metrics::histogram!(catalog::SINK_LAG, &labels).record(lag);
                    metrics::counter!(catalog::SINK_EVENTS, "sink" => id.to_owned(), "outcome" => "delivered").increment(1);
                }
                Fate::Parked(parked) => {
                    metrics::counter!(catalog::SINK_EVENTS, "sink" => id.to_owned(), "outcome" => "parked").increment(1);
                    pending.parked.push(parked);
                }
            }
        }
        cursor = next;
        // Progress is written at most every FLUSH unless the feed was read to its end or
        // events were parked (the ledger must hold a parked order before its lane is read
        // back): a storm's batches cost the ledger a few commits a second, not one each.
        let caught_up = events.len() < BATCH as usize;
        if caught_up || !pending.parked.is_empty() || flushed.elapsed() >= FLUSH {
            if !flush(d, id, fence, &mut pending).await? {
                return Ok(Exit::Lost);
            }
            dirty = false;
            flushed = Instant::now();
            if let Ok(head) = d.feed.head().await {
                metrics::gauge!(catalog::SINK_BACKLOG, &labels)
                    .set(head.saturating_sub(cursor) as f64);
            }
        }
    }
}

/// Writes `pending` under `fence` and empties it, keeping its cursor (where the next batch
/// goes on from: an emptied progress must never move the ledger's cursor back). `false` when
/// the fence is no longer the sink's.
async fn flush(
    d: &Arc<Delivery>,
    id: &str,
    fence: i64,
    pending: &mut Progress,
) -> anyhow::Result<bool> {
    let p = std::mem::take(pending);
    pending.cursor = p.cursor;
    d.ledger.advance(id, fence, &p).await
}

/// Disables a sink that is gone (410) or failed for too long, and gives its lease up.
async fn disable(d: &Arc<Delivery>, id: &str, reason: &str) -> anyhow::Result<Exit> {
    tracing::warn!(sink = id, reason, "event sink disabled");
    d.ledger.set_enabled(id, false, Some(reason)).await?;
    d.ledger.release(id, &d.owner).await?;
    metrics::gauge!(catalog::SINK_ENABLED, "sink" => id.to_owned()).set(0.0);
    Ok(Exit::Stop)
}

async fn deliver(
    target: &mut Target,
    events: &[Event],
    lanes: &mut webhook::Lanes,
    ctx: &Ctx<'_>,
) -> Result<Batch, Halt> {
    match target {
        Target::Webhook(w) => w.deliver(events, lanes, ctx).await,
        Target::Nats(n) => Ok(n.deliver(events, ctx).await),
    }
}
