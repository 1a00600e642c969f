//! Event delivery: the feed, pushed to the shop's own systems — signed webhooks
//! ([`webhook`], the Standard Webhooks format) and a NATS JetStream sink ([`nats`]).
//!
//! Each sink is a row of the ledger ([`crate::ledger::sinks`]) with a cursor: every event up
//! to it was received (or set aside as a dead letter). A sink is delivered by the one
//! instance holding its lease; the others wait and take over when it lapses (an instance
//! killed -9 loses it after [`LEASE`]). The holder reads the feed after the cursor, delivers a
//! batch, and only then moves the cursor, under the lease's fence: an instance that dies
//! mid-batch leaves the batch to be sent again (at least once, never skipped), and one that
//! lost its lease cannot move the cursor of the instance that took over. An event's id and
//! body are the feed's own, so a batch sent twice carries the same ids and bytes.
//!
//! Delivery runs beside the claim path and shares nothing with it but the ledger's reads: a
//! slow or dead receiver grows the sink's backlog, never the claims' latency.

mod backoff;
mod lease;
pub mod nats;
mod runner;
pub mod sign;
pub mod view;
pub mod webhook;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use crate::config::DeliveryArgs;
use crate::feed::Feed;
use crate::ledger::sinks::{NewSink, SinkKind, SinkRow};
use crate::ledger::Ledger;
use crate::supervise::Supervisor;

/// How long a sink's lease runs without renewal: how soon another instance takes over a
/// deliverer that died.
pub const LEASE: Duration = Duration::from_secs(10);
/// How often the lease is renewed.
const RENEW: Duration = Duration::from_secs(3);
/// How often the list of sinks is re-read (a sink added or enabled through another instance
/// starts within this).
const RESCAN: Duration = Duration::from_secs(1);
/// Events per batch.
pub const BATCH: u32 = 256;
/// How often a sink's progress is written while it delivers batch after batch (each write is
/// a commit of the ledger, which the embedded ledger shares with the claims).
const FLUSH: Duration = Duration::from_millis(500);

/// The sinks this instance may deliver, and the tasks delivering them.
pub struct Delivery {
    ledger: Arc<dyn Ledger>,
    feed: Arc<Feed>,
    cfg: DeliveryArgs,
    /// This instance's name in the leases.
    owner: String,
    /// Sinks configured by this instance's own flags (other flag sinks belong to the
    /// instances started with them).
    own_flags: HashSet<String>,
    http: reqwest::Client,
    rescan: tokio::sync::Notify,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("owner", &self.owner)
            .field("own_flags", &self.own_flags)
            .finish_non_exhaustive()
    }
}

/// The id of the sink a flag configures: the same on every instance started with it.
pub fn flag_sink_id(kind: SinkKind, target: &str, subject: &str) -> String {
    let digest = Sha256::digest(format!("{}\n{target}\n{subject}", kind.as_str()));
    let prefix = match kind {
        SinkKind::Webhook => "whk_",
        SinkKind::Nats => "nats_",
    };
    format!("{prefix}{}", &hex::encode(digest)[..16])
}

/// A new sink's id for `/v1/webhooks`.
pub fn new_sink_id() -> String {
    format!("whk_{}", hex::encode(rand::random::<[u8; 8]>()))
}

impl Delivery {
    /// Registers the sinks of `cfg` (new ones start at the feed's current end) and starts
    /// delivering under `supervisor`.
    pub async fn start(
        ledger: Arc<dyn Ledger>,
        feed: Arc<Feed>,
        cfg: DeliveryArgs,
        supervisor: &Arc<Supervisor>,
    ) -> anyhow::Result<Arc<Delivery>> {
        let mut flags = Vec::new();
        if !cfg.webhooks.is_empty() {
            let secret = cfg.webhook_secret.as_ref().ok_or_else(|| {
                anyhow::anyhow!("--webhook needs --webhook-secret (whsec_ + base64)")
            })?;
            sign::Key::parse(secret.expose())
                .map_err(|e| anyhow::anyhow!("--webhook-secret: {e}"))?;
            for url in &cfg.webhooks {
                webhook::check_url(url).map_err(|e| anyhow::anyhow!("--webhook {url}: {e}"))?;
                flags.push(NewSink {
                    id: flag_sink_id(SinkKind::Webhook, url, ""),
                    kind: SinkKind::Webhook,
                    target: url.clone(),
                    subject: None,
                    secret: Some(secret.expose().to_owned()),
                    origin: "flag",
                    description: Some("--webhook".to_owned()),
                });
            }
        }
        if let Some(url) = &cfg.nats {
            nats::check_subject(&cfg.nats_subject)
                .map_err(|e| anyhow::anyhow!("--nats-subject: {e}"))?;
            flags.push(NewSink {
                id: flag_sink_id(SinkKind::Nats, url, &cfg.nats_subject),
                kind: SinkKind::Nats,
                target: url.clone(),
                subject: Some(cfg.nats_subject.clone()),
                secret: None,
                origin: "flag",
                description: Some(format!("--nats (stream {})", cfg.nats_stream)),
            });
        }
        let head = feed.head().await?;
        let now = crate::clock::now().timestamp_micros();
        for sink in &flags {
            ledger.put_sink(sink, head, now).await?;
        }
        let http = reqwest::Client::builder()
            .timeout(cfg.webhook_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("seckill-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let delivery = Arc::new(Delivery {
            owner: format!(
                "{}-{}",
                std::process::id(),
                hex::encode(rand::random::<[u8; 6]>())
            ),
            own_flags: flags.into_iter().map(|s| s.id).collect(),
            ledger,
            feed,
            cfg,
            http,
            rescan: tokio::sync::Notify::new(),
        });
        let me = Arc::downgrade(&delivery);
        supervisor.spawn_graceful("event-delivery", move |stop| {
            let me = me.clone();
            async move {
                match me.upgrade() {
                    Some(d) => d.run(stop).await,
                    None => Ok(()),
                }
            }
        });
        Ok(delivery)
    }

    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    pub fn feed(&self) -> &Arc<Feed> {
        &self.feed
    }

    /// Re-reads the sinks now (after one was added, enabled or removed here).
    pub fn rescan(&self) {
        self.rescan.notify_one();
    }

    /// Whether this instance delivers `sink`.
    fn mine(&self, sink: &SinkRow) -> bool {
        sink.enabled == 1 && (sink.origin == "api" || self.own_flags.contains(&sink.id))
    }

    /// Keeps one task per deliverable sink until `stop`, then gives their leases up.
    async fn run(
        self: Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut running: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
        loop {
            while let Some(done) = tasks.try_join_next_with_id() {
                let id = match &done {
                    Ok((id, ())) => *id,
                    Err(e) => e.id(),
                };
                running.retain(|_, h| h.id() != id);
            }
            match self.ledger.sinks().await {
                Ok(sinks) => {
                    let wanted: HashSet<&str> = sinks
                        .iter()
                        .filter(|s| self.mine(s))
                        .map(|s| s.id.as_str())
                        .collect();
                    running.retain(|id, h| {
                        let keep = wanted.contains(id.as_str());
                        if !keep {
                            h.abort();
                        }
                        keep
                    });
                    for sink in sinks.into_iter().filter(|s| self.mine(s)) {
                        if !running.contains_key(&sink.id) {
                            let id = sink.id.clone();
                            let h = tasks.spawn(runner::run(self.clone(), sink));
                            running.insert(id, h);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "reading the event sinks failed")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RESCAN) => {}
                _ = self.rescan.notified() => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        for id in running.keys() {
            if let Err(e) = self.ledger.release(id, &self.owner).await {
                tracing::warn!(sink = %id, error = %format!("{e:#}"), "giving up a sink's lease failed");
            }
        }
        Ok(())
    }
}
