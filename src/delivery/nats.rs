//! The NATS JetStream sink: each event published to `PREFIX.<type>` (`seckill.order.won`)
//! with `Nats-Msg-Id` = the event's id, and only counted as delivered once JetStream
//! acknowledged it. A batch published again after a crash or a lost lease is dropped by the
//! stream's de-duplication window (two minutes by default) instead of stored twice.
//!
//! Each message also expects the stream's last sequence to be the one before it
//! (`Nats-Expected-Last-Sequence`), so JetStream refuses a message published out of its place:
//! the stream holds the feed in order, with no gap and no repeat. A new holder, and a publisher
//! after a failure, first reads the stream's last message: when it is one of this sink's
//! (`Seckill-Sink`, the sink's id and creation) its `Seckill-Cursor` says where to go on, so
//! what the stream holds is never published again, even after the de-duplication window. The
//! stream is seckill's own: another publisher's messages in it make those checks refuse.
//!
//! JetStream is part of the shop's own infrastructure, so the sink never gives up on an
//! event: while NATS is down, the backlog grows and publishing resumes when it is back.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use bytes::Bytes;

use super::runner::Ctx;
use super::webhook::{Batch, Fate};
use crate::domain::Event;
use crate::ledger::sinks::SinkRow;

/// The header holding an event's feed position.
pub const CURSOR_HEADER: &str = "Seckill-Cursor";
/// The header holding the sink's id and creation (`id@created_at`).
pub const SINK_HEADER: &str = "Seckill-Sink";
/// JetStream's optimistic check: the stream's last sequence must be this.
const EXPECTED_LAST_SEQ: &str = "Nats-Expected-Last-Sequence";

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
    /// This sink's row in this ledger (`id@created_at`): a stream's message written by a sink
    /// of the same id in another ledger (a fresh data directory, another deployment) is not
    /// one of its own.
    incarnation: String,
    /// The stream's last sequence as last read or acknowledged: the next publish expects it.
    last_seq: Option<u64>,
    js: Option<(jetstream::Context, stream::Stream)>,
}

impl Nats {
    pub fn new(sink: &SinkRow, stream: &str) -> Nats {
        Nats {
            url: sink.target.clone(),
            prefix: sink.subject.clone().unwrap_or_else(|| "seckill".to_owned()),
            stream: stream.to_owned(),
            incarnation: format!("{}@{}", sink.id, sink.created_at),
            last_seq: None,
            js: None,
        }
    }

    async fn connect(&mut self) -> anyhow::Result<&mut (jetstream::Context, stream::Stream)> {
        if self.js.is_none() {
            let client = async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(5))
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

    /// Reads the stream's last message (retrying until NATS answers): the position of this
    /// sink's last acknowledged event when that message is one of its own and within the
    /// feed (`head`).
    pub async fn resume(&mut self, head: u64, ctx: &Ctx<'_>) -> anyhow::Result<Option<u64>> {
        let mut attempts = 0;
        loop {
            match self.last_acked().await {
                Ok(Some(at)) if at > head => {
                    tracing::error!(at, head, "the stream's last message is past this feed's newest event (a ledger restored from an older backup?); publishing after it without skipping");
                    return Ok(None);
                }
                Ok(at) => return Ok(at),
                Err(e) => {
                    attempts += 1;
                    self.js = None;
                    ctx.failed(&format!("reading the stream's last message: {e:#}"))
                        .await;
                    tokio::time::sleep(super::backoff::after(attempts, Duration::from_secs(10)))
                        .await;
                }
            }
        }
    }

    /// The stream's last sequence (kept for the next publish) and, when its last message is
    /// one of this sink's, that event's position. A last message that cannot be read (purged,
    /// expired) is nobody's.
    async fn last_acked(&mut self) -> anyhow::Result<Option<u64>> {
        let incarnation = self.incarnation.clone();
        let (_, stream) = self.connect().await?;
        let state = stream.info().await?.state.clone();
        let msg = match state.messages {
            0 => None,
            _ => match stream.get_raw_message(state.last_sequence).await {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, "the stream's last message cannot be read; taking it as nobody's");
                    None
                }
            },
        };
        self.last_seq = Some(state.last_sequence);
        let Some(msg) = msg else {
            return Ok(None);
        };
        let ours = msg.headers.get(SINK_HEADER).map(|v| v.as_str()) == Some(incarnation.as_str());
        Ok(ours
            .then(|| msg.headers.get(CURSOR_HEADER)?.as_str().parse().ok())
            .flatten())
    }

    /// Publishes a batch until JetStream acknowledged all of it. Each message expects the
    /// stream's last sequence to be the one before it (`Nats-Expected-Last-Sequence`), so the
    /// stream takes the batch in order with no gap: after a failure the stream's last message
    /// says how far it got, and publishing goes on after it — never twice, however long NATS
    /// was away. `Stale` when the stream already holds events of this sink past the batch: a
    /// newer holder published them, and this one lost its lease.
    pub async fn deliver(&mut self, events: &[Event], ctx: &Ctx<'_>) -> Batch {
        let mut attempts = 0u32;
        let mut from = 0;
        let first: u64 = events
            .first()
            .and_then(|e| e.cursor.parse().ok())
            .unwrap_or(0);
        let last: u64 = events
            .last()
            .and_then(|e| e.cursor.parse().ok())
            .unwrap_or(0);
        let taken = |events: &[Event]| {
            let at = crate::clock::now().timestamp_micros();
            Batch::Delivered(events.iter().map(|_| Fate::Taken(at)).collect())
        };
        loop {
            match self.publish(&events[from..]).await {
                Ok(()) => return taken(events),
                Err(e) => {
                    attempts += 1;
                    self.js = None;
                    ctx.failed(&format!("{e:#}")).await;
                    let wait = super::backoff::after(attempts, Duration::from_secs(10));
                    tokio::time::sleep(wait).await;
                    match self.last_acked().await {
                        Ok(Some(at)) if at > last => return Batch::Stale,
                        Ok(Some(at)) if at >= first => {
                            from = events
                                .iter()
                                .take_while(|e| e.cursor.parse::<u64>().is_ok_and(|c| c <= at))
                                .count();
                            if from == events.len() {
                                return taken(events);
                            }
                        }
                        Ok(_) => from = 0,
                        Err(e) => {
                            self.js = None;
                            self.last_seq = None;
                            tracing::warn!(error = %format!("{e:#}"), "reading the stream's last message failed");
                        }
                    }
                }
            }
        }
    }

    async fn publish(&mut self, events: &[Event]) -> anyhow::Result<()> {
        let prefix = self.prefix.clone();
        let incarnation = self.incarnation.clone();
        if self.last_seq.is_none() {
            self.last_acked().await?;
        }
        let mut expect = self.last_seq.expect("just read");
        let (js, _) = self.connect().await?;
        let mut acks = Vec::with_capacity(events.len());
        for e in events {
            let mut headers = HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, e.id.as_str());
            headers.insert(EXPECTED_LAST_SEQ, expect.to_string().as_str());
            headers.insert(CURSOR_HEADER, e.cursor.as_str());
            headers.insert(SINK_HEADER, incarnation.as_str());
            let body = Bytes::from(serde_json::to_vec(e)?);
            let subject = format!("{prefix}.{}", e.kind.as_str());
            acks.push(js.publish_with_headers(subject, headers, body).await?);
            expect += 1;
        }
        for ack in acks {
            let ack = tokio::time::timeout(Duration::from_secs(10), ack)
                .await
                .map_err(|_| anyhow::anyhow!("JetStream did not acknowledge in 10 s"))??;
            self.last_seq = Some(ack.sequence);
        }
        Ok(())
    }
}
