//! The NATS JetStream sink: each event published to `PREFIX.<type>` (`seckill.order.won`)
//! with `Nats-Msg-Id` = the event's id, and only counted as delivered once JetStream
//! acknowledged it. A batch published again after a crash or a lost lease is dropped by the
//! stream's de-duplication window (two minutes by default) instead of stored twice.
//!
//! A new holder of the sink starts after the last event the stream acknowledged, read from
//! the stream's last message (its `Seckill-Cursor` header), when that is further than the
//! ledger's cursor: a publisher that died between JetStream's acknowledgement and recording
//! it does not publish again what the stream holds, even after the window closed.
//!
//! JetStream is part of the shop's own infrastructure, so the sink never gives up on an
//! event: while NATS is down, the backlog grows and publishing resumes when it is back.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use bytes::Bytes;

use super::runner::{Ctx, Outcome};
use crate::domain::Event;
use crate::ledger::sinks::SinkRow;

/// The header holding an event's feed position.
pub const CURSOR_HEADER: &str = "Seckill-Cursor";
/// The header holding the sink's id.
pub const SINK_HEADER: &str = "Seckill-Sink";

/// Checks a subject prefix: NATS tokens separated by dots, no wildcards or spaces.
pub fn check_subject(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 200
        && prefix.split('.').all(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_graphic() && !matches!(c, '*' | '>'))
        });
    ok.then_some(()).ok_or_else(|| {
        format!("{prefix:?} is not a NATS subject prefix (tokens separated by dots, no wildcards)")
    })
}

/// One NATS sink.
pub struct Nats {
    url: String,
    prefix: String,
    stream: String,
    sink: String,
    js: Option<(jetstream::Context, stream::Stream)>,
}

impl Nats {
    pub fn new(sink: &SinkRow, stream: &str) -> Nats {
        Nats {
            url: sink.target.clone(),
            prefix: sink.subject.clone().unwrap_or_else(|| "seckill".to_owned()),
            stream: stream.to_owned(),
            sink: sink.id.clone(),
            js: None,
        }
    }

    async fn connect(&mut self) -> anyhow::Result<&mut (jetstream::Context, stream::Stream)> {
        if self.js.is_none() {
            let client = async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(5))
                .retry_on_initial_connect()
                .connect(&self.url)
                .await?;
            let js = jetstream::new(client);
            let config = stream::Config {
                name: self.stream.clone(),
                subjects: vec![format!("{}.>", self.prefix)],
                ..Default::default()
            };
            let stream =
                tokio::time::timeout(Duration::from_secs(10), js.get_or_create_stream(config))
                    .await
                    .map_err(|_| anyhow::anyhow!("JetStream did not answer in 10 s"))??;
            self.js = Some((js, stream));
        }
        Ok(self.js.as_mut().expect("just connected"))
    }

    /// The position of the last event of this sink the stream holds, if any.
    pub async fn resume(&mut self, ctx: &Ctx<'_>) -> anyhow::Result<Option<u64>> {
        loop {
            match self.last_acked().await {
                Ok(at) => return Ok(at),
                Err(e) => {
                    self.js = None;
                    ctx.failed(&format!("reading the stream's last message: {e:#}"))
                        .await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn last_acked(&mut self) -> anyhow::Result<Option<u64>> {
        let sink = self.sink.clone();
        let (_, stream) = self.connect().await?;
        let last = stream.info().await?.state.last_sequence;
        if last == 0 {
            return Ok(None);
        }
        let msg = match stream.get_raw_message(last).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "the stream's last message could not be read");
                return Ok(None);
            }
        };
        let ours = msg.headers.get(SINK_HEADER).map(|v| v.as_str()) == Some(sink.as_str());
        Ok(ours
            .then(|| msg.headers.get(CURSOR_HEADER)?.as_str().parse().ok())
            .flatten())
    }

    /// Publishes a batch until JetStream acknowledged all of it.
    pub async fn deliver(&mut self, events: &[Event], ctx: &Ctx<'_>) -> Vec<Outcome> {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            match self.publish(events).await {
                Ok(()) => {
                    let at = crate::clock::now().timestamp_micros();
                    return events.iter().map(|_| Outcome::Delivered(at)).collect();
                }
                Err(e) => {
                    self.js = None;
                    ctx.failed(&format!("{e:#}")).await;
                    let wait = super::backoff::after(attempts, Duration::from_secs(10));
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn publish(&mut self, events: &[Event]) -> anyhow::Result<()> {
        let prefix = self.prefix.clone();
        let sink = self.sink.clone();
        let (js, _) = self.connect().await?;
        let mut acks = Vec::with_capacity(events.len());
        for e in events {
            let mut headers = HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, e.id.as_str());
            headers.insert(CURSOR_HEADER, e.cursor.as_str());
            headers.insert(SINK_HEADER, sink.as_str());
            let body = Bytes::from(serde_json::to_vec(e)?);
            let subject = format!("{prefix}.{}", e.kind.as_str());
            acks.push(js.publish_with_headers(subject, headers, body).await?);
        }
        for ack in acks {
            tokio::time::timeout(Duration::from_secs(10), ack)
                .await
                .map_err(|_| anyhow::anyhow!("JetStream did not acknowledge in 10 s"))??;
        }
        Ok(())
    }
}
