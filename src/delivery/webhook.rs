//! Webhook endpoints: each event POSTed as JSON, signed in the Standard Webhooks format
//! ([`super::sign`]). A 2xx answer ends an event's delivery; 410 Gone disables the endpoint;
//! anything else (another status, a refused connection, a timeout) is retried with
//! the backoff of `delivery::backoff` for up to `--webhook-max-age`, then set aside as a dead letter.
//!
//! Events of one order go one after the other, each only after the previous one was taken,
//! so a receiver sees an order's transitions in their order; events of different orders go
//! side by side, up to `--webhook-concurrency` at once. An event a receiver keeps refusing
//! holds back only its own order's later events, until it is taken or dead.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use super::runner::{Ctx, Halt, Outcome};
use super::sign::Key;
use crate::domain::Event;
use crate::ledger::sinks::{DeadLetter, Progress, SinkRow};

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
    Failed(String),
}

impl Webhook {
    pub fn new(sink: &SinkRow) -> Webhook {
        Webhook {
            url: sink.target.clone(),
            key: sink.secret.as_deref().and_then(|s| Key::parse(s).ok()),
        }
    }

    /// Delivers a batch: the outcome of each event, in the batch's order.
    pub async fn deliver(&self, events: &[Event], ctx: &Ctx<'_>) -> Result<Vec<Outcome>, Halt> {
        // Events of one order (of one campaign, for campaign events) in a lane, in order.
        let mut lanes: Vec<Vec<usize>> = Vec::new();
        let mut lane_of: HashMap<&str, usize> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            let key = match &e.order {
                Some(o) => o.order_id.as_str(),
                None => e.campaign_id.as_str(),
            };
            let lane = *lane_of.entry(key).or_insert_with(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            });
            lanes[lane].push(i);
        }
        let bodies: Vec<String> = events
            .iter()
            .map(|e| serde_json::to_string(e).expect("an event serialises"))
            .collect();
        let mut outcomes: Vec<Option<Outcome>> = events.iter().map(|_| None).collect();
        let concurrency = ctx.cfg().webhook_concurrency as usize;
        let mut runs = futures::stream::iter(lanes.into_iter().map(|lane| {
            let bodies = &bodies;
            async move {
                let mut done = Vec::with_capacity(lane.len());
                for i in lane {
                    done.push((i, self.deliver_one(&events[i], &bodies[i], ctx).await?));
                }
                Ok::<_, Halt>(done)
            }
        }))
        .buffer_unordered(concurrency);
        while let Some(lane) = runs.next().await {
            for (i, o) in lane? {
                outcomes[i] = Some(o);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.expect("every lane ran"))
            .collect())
    }

    /// One event, retried until taken, gone or too old.
    async fn deliver_one(&self, event: &Event, body: &str, ctx: &Ctx<'_>) -> Result<Outcome, Halt> {
        let started = Instant::now();
        let mut attempts: u32 = 0;
        loop {
            attempts += 1;
            match self.attempt(&event.id, body, ctx).await {
                Attempt::Taken => {
                    return Ok(Outcome::Delivered(crate::clock::now().timestamp_micros()))
                }
                Attempt::Gone => return Err(gone(&self.url)),
                Attempt::Failed(error) => {
                    ctx.failed(&error).await;
                    if started.elapsed() >= ctx.cfg().webhook_max_age {
                        tracing::warn!(sink = ctx.sink, event = %event.id, attempts, error, "giving up on an event: kept as a dead letter");
                        return Ok(Outcome::Dead(DeadLetter {
                            pos: event.cursor.parse().unwrap_or_default(),
                            event_id: event.id.clone(),
                            body: body.to_owned(),
                            attempts: attempts as i64,
                            last_error: error,
                            dead_at: crate::clock::now().timestamp_micros(),
                        }));
                    }
                    let wait = super::backoff::after(attempts, ctx.cfg().webhook_max_backoff);
                    let left = ctx.cfg().webhook_max_age.saturating_sub(started.elapsed());
                    tokio::time::sleep(wait.min(left.max(Duration::from_millis(1)))).await;
                }
            }
        }
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
            Err(e) => Attempt::Failed(format!("{e}")),
        }
    }

    /// Sends the dead letters marked for replay once each: those taken are removed, the
    /// others go back to being dead letters with one more attempt.
    pub async fn replay(&self, ctx: &Ctx<'_>, cursor: u64) -> anyhow::Result<()> {
        let store = &ctx.delivery.ledger;
        let letters = store.dead_letters(ctx.sink, true, 100).await?;
        if letters.is_empty() {
            return Ok(());
        }
        let (mut taken, mut again) = (Vec::new(), Vec::new());
        for mut d in letters {
            match self.attempt(&d.event_id, &d.body, ctx).await {
                Attempt::Taken => taken.push(d.pos),
                Attempt::Gone => {
                    let reason = gone(&self.url);
                    let Halt::Gone(reason) = reason;
                    store.set_enabled(ctx.sink, false, Some(&reason)).await?;
                    break;
                }
                Attempt::Failed(error) => {
                    d.attempts = 1;
                    d.last_error = error;
                    d.dead_at = crate::clock::now().timestamp_micros();
                    again.push(d);
                }
            }
        }
        tracing::info!(
            sink = ctx.sink,
            taken = taken.len(),
            refused = again.len(),
            "replayed dead letters"
        );
        store.replayed(ctx.sink, ctx.fence(), &taken).await?;
        if !again.is_empty() {
            let p = Progress {
                cursor,
                dead: again,
                ..Progress::default()
            };
            store.advance(ctx.sink, ctx.fence(), &p).await?;
        }
        Ok(())
    }
}

fn gone(url: &str) -> Halt {
    Halt::Gone(format!(
        "{url} answered 410 Gone at {}",
        crate::clock::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    ))
}
