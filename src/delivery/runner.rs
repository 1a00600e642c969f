//! One sink's delivery loop: take the lease, read the feed after the cursor, deliver a batch,
//! move the cursor under the fence, again. A lost lease (another instance took the sink over,
//! or this one could not renew it in time) ends the loop at once; the cursor then belongs to
//! the new holder, which starts after the last batch this one recorded.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{nats, webhook, Delivery, BATCH, LEASE, RENEW};
use crate::domain::{Error, Event, EventFilter};
use crate::ledger::sinks::{DeadLetter, Progress, SinkKind, SinkRow};
use crate::telemetry::catalog;

/// How an event of a batch ended.
#[derive(Debug)]
pub enum Outcome {
    /// A receiver took it, at these micros.
    Delivered(i64),
    /// Retried for the whole `--webhook-max-age` and set aside.
    Dead(DeadLetter),
}

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
    let mut target = match sink.kind() {
        SinkKind::Webhook => Target::Webhook(webhook::Webhook::new(&sink)),
        SinkKind::Nats => Target::Nats(Box::new(nats::Nats::new(&sink, &d.cfg.nats_stream))),
    };
    loop {
        match run_leased(&d, &sink, &mut target).await {
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

async fn run_leased(
    d: &Arc<Delivery>,
    sink: &SinkRow,
    target: &mut Target,
) -> anyhow::Result<Exit> {
    let id = sink.id.as_str();
    let (fence, mut cursor) = loop {
        let now = crate::clock::now().timestamp_micros();
        if let Some(held) = d.ledger.lease(id, &d.owner, now, LEASE).await? {
            break held;
        }
        match d.ledger.sink(id).await? {
            Some(s) if s.enabled == 1 => tokio::time::sleep(RENEW).await,
            _ => return Ok(Exit::Stop),
        }
    };
    tracing::info!(sink = id, fence, cursor, "delivering this sink");
    let labels = [("sink", id.to_owned())];
    metrics::gauge!(catalog::SINK_HOLDER, &labels).set(1.0);
    metrics::gauge!(catalog::SINK_ENABLED, &labels).set(1.0);
    let (lost_tx, lost) = watch::channel(false);
    let keeper = KeepLease(tokio::spawn(keep_lease(
        d.clone(),
        id.to_owned(),
        fence,
        lost_tx,
    )));
    let ctx = Ctx {
        delivery: d,
        sink: id,
        fence,
    };
    if let Target::Nats(n) = target {
        if let Some(acked) = n.resume(&ctx).await? {
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
    let mut next_replay = Instant::now();
    loop {
        if *lost.borrow() {
            drop(keeper);
            return Ok(Exit::Lost);
        }
        if let Target::Webhook(w) = target {
            if Instant::now() >= next_replay {
                next_replay = Instant::now() + Duration::from_secs(2);
                w.replay(&ctx, cursor).await?;
            }
        }
        let filter = EventFilter {
            after: Some(cursor),
            limit: BATCH,
            campaign: None,
            kind: None,
            wait_ms: 1000,
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
                let p = Progress {
                    cursor: pruned,
                    lost: pruned - cursor,
                    ..Progress::default()
                };
                if !d.ledger.advance(id, fence, &p).await? {
                    return Ok(Exit::Lost);
                }
                cursor = pruned;
                continue;
            }
            Err(e) => anyhow::bail!("reading the feed: {e}"),
        };
        let Some(last) = events.last() else {
            metrics::gauge!(catalog::SINK_BACKLOG, &labels).set(0.0);
            continue;
        };
        let next: u64 = last.cursor.parse()?;
        let mut lost_wait = lost.clone();
        let outcomes = tokio::select! {
            o = deliver(target, &events, &ctx) => o?,
            _ = lost_wait.wait_for(|l| *l) => return Ok(Exit::Lost),
        };
        let outcomes = match outcomes {
            Ok(o) => o,
            Err(Halt::Gone(reason)) => {
                tracing::warn!(sink = id, reason, "the endpoint is gone: disabled");
                d.ledger.set_enabled(id, false, Some(&reason)).await?;
                metrics::gauge!(catalog::SINK_ENABLED, &labels).set(0.0);
                return Ok(Exit::Stop);
            }
        };
        let mut p = Progress {
            cursor: next,
            ..Progress::default()
        };
        for (event, outcome) in events.iter().zip(outcomes) {
            match outcome {
                Outcome::Delivered(at) => {
                    p.delivered += 1;
                    p.delivered_at = Some(p.delivered_at.unwrap_or(at).max(at));
                    let lag = (at - event.at.timestamp_micros()).max(0) as f64 / 1e6;
                    metrics::histogram!(catalog::SINK_LAG, &labels).record(lag);
                }
                Outcome::Dead(dead) => p.dead.push(dead),
            }
        }
        metrics::counter!(catalog::SINK_EVENTS, "sink" => id.to_owned(), "outcome" => "delivered")
            .increment(p.delivered);
        metrics::counter!(catalog::SINK_EVENTS, "sink" => id.to_owned(), "outcome" => "dead")
            .increment(p.dead.len() as u64);
        if !d.ledger.advance(id, fence, &p).await? {
            return Ok(Exit::Lost);
        }
        cursor = next;
        if let Ok(head) = d.feed.head().await {
            metrics::gauge!(catalog::SINK_BACKLOG, &labels).set(head.saturating_sub(cursor) as f64);
        }
    }
}

async fn deliver(
    target: &mut Target,
    events: &[Event],
    ctx: &Ctx<'_>,
) -> anyhow::Result<Result<Vec<Outcome>, Halt>> {
    match target {
        Target::Webhook(w) => Ok(w.deliver(events, ctx).await),
        Target::Nats(n) => Ok(Ok(n.deliver(events, ctx).await)),
    }
}

/// Aborts the lease keeper when the loop that holds the lease ends.
struct KeepLease(tokio::task::JoinHandle<()>);

impl Drop for KeepLease {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease every [`RENEW`]; says it is lost when another owner holds it, the sink
/// was disabled or removed, or no renewal got through for nearly a whole [`LEASE`] (another
/// instance may take it over from then on).
async fn keep_lease(d: Arc<Delivery>, id: String, fence: i64, lost: watch::Sender<bool>) {
    let mut renewed = Instant::now();
    loop {
        tokio::time::sleep(RENEW).await;
        let now = crate::clock::now().timestamp_micros();
        match d.ledger.lease(&id, &d.owner, now, LEASE).await {
            Ok(Some((f, _))) if f == fence => renewed = Instant::now(),
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(sink = %id, error = %format!("{e:#}"), "renewing a sink's lease failed");
                if renewed.elapsed() + RENEW >= LEASE {
                    break;
                }
            }
        }
    }
    let _ = lost.send(true);
}
