//! The scale-out instance's stock board: how each `seckill serve` learns, without asking Redis
//! per request, that a campaign is sold out — and learns promptly when it no longer is.
//!
//! It keeps the contract of [`crate::guard::soldout`]:
//!
//! - **claims**: a `sold_out` answer of the claim script carries the remaining stock; when it is
//!   0, the instance (on a task of its own, so that claim's answer never waits for it)
//!   registers the campaign (its facts from the gate), loads every holder from
//!   `{c:<id>}:users` (a holder must hear `already_claimed`, never the fast `sold_out`) and only
//!   then publishes "0 left". A `won` answer adds the winner as a holder.
//! - **restock, cancel, status change** through any instance: once the gate applied it, that
//!   instance re-reads the campaign and `PUBLISH`es its id on [`CHANNEL`]; every instance
//!   subscribes on a dedicated connection (pub/sub cannot share the multiplexed one) and
//!   re-reads the campaign from Redis when it hears an id.
//! - **lost messages** (a subscriber reconnecting, a Sentinel deployment without a subscriber,
//!   a claim answer overtaken by a restock): every `max_staleness` each instance re-reads every
//!   campaign it believes sold out (one `HMGET` per such campaign, never per request). A stale
//!   `sold_out` therefore outlives a restock by at most `max_staleness` plus one round trip.
//! - **holders by version**: every script that changes `{c:<id>}:users` (a win, a release, an
//!   install) bumps the campaign's `hver` in the same atomic step, and the re-read fetches it
//!   with the stock. Holders are reloaded only when the version differs from the one this
//!   instance last loaded — a cancel followed at once by a re-win is seen even though the
//!   number of holders is unchanged — so an idle sold-out campaign costs one `HMGET` per tick
//!   however many holders it has, and a change costs one `HSCAN` pass.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;

use super::keys::Keys;
use crate::guard::soldout::{StockBoard, StockEntry, StockFacts};
use crate::redis_conn::{RedisConn, RedisTarget};
use crate::supervise::Supervisor;

/// Supervised task names.
pub const REFRESHER: &str = "stock-refresher";
pub const SUBSCRIBER: &str = "stock-subscriber";

/// Fields per `HSCAN` page when holders are (re)loaded.
const HOLDER_PAGE: usize = 10_000;

/// The pub/sub channel on which instances announce a campaign whose stock may have grown.
pub const CHANNEL: &str = "seckill:stock";

pub struct StockKeeper {
    board: Arc<StockBoard>,
    conn: RedisConn,
    /// One campaign loads its holders at a time; concurrent sold-out answers skip the load.
    loading: tokio::sync::Mutex<()>,
    /// Per campaign, the holders version (`hver`) whose holders this instance has loaded.
    loaded: parking_lot::Mutex<std::collections::HashMap<String, String>>,
}

impl StockKeeper {
    pub fn new(conn: RedisConn) -> Arc<Self> {
        Arc::new(Self {
            board: StockBoard::new(),
            conn,
            loading: tokio::sync::Mutex::new(()),
            loaded: Default::default(),
        })
    }

    pub fn board(&self) -> Arc<StockBoard> {
        self.board.clone()
    }

    /// A claim answered `won` for `user`.
    pub fn won(&self, campaign: &str, user: &str) {
        if let Some(e) = self.board.get(campaign) {
            e.add_holder(user);
        }
    }

    /// A claim answered `sold_out` with `remaining` left; `facts` (not awaited unless needed)
    /// reads the campaign's facts when it is not on the board yet.
    pub async fn sold_out(
        &self,
        campaign: &str,
        remaining: u64,
        facts: impl std::future::Future<Output = Option<StockFacts>>,
    ) {
        let entry = self.board.get(campaign);
        if remaining > 0 {
            if let Some(e) = entry {
                e.publish(remaining, true);
            }
            return;
        }
        if entry.as_ref().is_some_and(|e| e.is_sold_out()) {
            return;
        }
        let Ok(_guard) = self.loading.try_lock() else {
            return; // another claim is loading a campaign; this one is answered by Redis
        };
        let entry = match self.board.get(campaign) {
            Some(e) => e,
            None => match facts.await {
                Some(f) => self.board.register(campaign, f),
                None => return,
            },
        };
        if let Err(e) = self.refresh(campaign, &entry, true).await {
            tracing::warn!(campaign, error = %e, "loading the sold-out campaign failed");
        }
    }

    /// Re-reads one campaign from the gate and publishes it. Holders are (re)loaded after the
    /// stock is read and before it is published — when `holders`, or when the holders version
    /// read with the stock differs from the one last loaded — so everyone who won before the
    /// stock read is known before "0 left" is.
    pub async fn refresh(
        &self,
        campaign: &str,
        entry: &StockEntry,
        holders: bool,
    ) -> redis::RedisResult<()> {
        let k = Keys::new(campaign);
        let mut conn = self.conn.clone();
        let (remaining, status, version): (Option<u64>, Option<String>, Option<String>) = conn
            .hmget(k.meta(), &["remaining", "status", "hver"])
            .await?;
        let Some(remaining) = remaining else {
            entry.publish(0, false);
            return Ok(());
        };
        let version = version.unwrap_or_default();
        let known = self.loaded.lock().get(campaign) == Some(&version);
        if holders || !known {
            // In pages of HOLDER_PAGE fields: a few round trips even for a million holders,
            // and never one reply that blocks Redis for long.
            let mut cursor = 0u64;
            loop {
                let (next, page): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                    .arg(k.users())
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(HOLDER_PAGE)
                    .query_async(&mut conn)
                    .await?;
                for (user, _held) in &page {
                    entry.add_holder(user);
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            self.loaded.lock().insert(campaign.to_owned(), version);
        }
        entry.publish(remaining, status.as_deref() == Some("active"));
        Ok(())
    }

    /// After a restock, cancel or status change through this instance: publish it here and
    /// announce it to every other instance.
    pub async fn changed(&self, campaign: &str) {
        if let Some(e) = self.board.get(campaign) {
            if let Err(err) = self.refresh(campaign, &e, false).await {
                tracing::warn!(campaign, error = %err, "re-reading the campaign's stock failed");
            }
        }
        let published: redis::RedisResult<i64> = self.conn.clone().publish(CHANNEL, campaign).await;
        if let Err(e) = published {
            tracing::warn!(campaign, error = %e, "announcing a stock change failed");
        }
    }

    /// Runs the refresher and (except under Sentinel) the subscriber as supervised tasks.
    pub fn supervise(
        self: &Arc<Self>,
        sup: &Arc<Supervisor>,
        every: Duration,
        target: &RedisTarget,
    ) {
        let me = Arc::downgrade(self);
        sup.spawn(REFRESHER, move |_| Self::refresh_loop(me.clone(), every));
        if target.sentinel_master.is_none() {
            // A cluster broadcasts PUBLISH to every node, so one seed node hears every message.
            let (me, url) = (Arc::downgrade(self), target.urls[0].clone());
            sup.spawn(SUBSCRIBER, move |_| {
                Self::subscribe(me.clone(), url.clone())
            });
        }
    }

    /// Re-reads every campaign believed sold out (or not yet published), every `every`, until
    /// the keeper is dropped.
    pub async fn refresh_loop(me: std::sync::Weak<Self>, every: Duration) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(me) = me.upgrade() else {
                return Ok(());
            };
            if crate::supervise::test_panic(REFRESHER) {
                panic!("test hook: the stock refresher dies");
            }
            for (id, e) in me.board.all() {
                if e.remaining() == 0 {
                    if let Err(err) = me.refresh(&id, &e, false).await {
                        tracing::warn!(campaign = id, error = %err, "stock re-read failed");
                    }
                }
            }
        }
    }

    /// Listens on `CHANNEL` over its own connection until the keeper is dropped; returns
    /// (for its supervisor) only if the keeper is gone. A lost connection is retried every
    /// 50–250 ms, so the subscriber is back within about 250 ms of Redis answering; after each
    /// (re)subscription every campaign on the board is re-read, since announcements made while
    /// it was away are lost. Sentinel deployments have no subscriber: the refresher bounds them.
    pub async fn subscribe(me: std::sync::Weak<Self>, url: String) -> anyhow::Result<()> {
        let mut retry = SUBSCRIBE_RETRY_MIN;
        let mut failing = false;
        loop {
            if me.upgrade().is_none() {
                return Ok(());
            }
            match listen(&url, &me).await {
                Ok(()) => return Ok(()),
                Err(Listen::Lost(e)) => {
                    retry = SUBSCRIBE_RETRY_MIN;
                    failing = false;
                    tracing::warn!(error = %e, "stock subscriber lost its connection; retrying");
                }
                Err(Listen::Connect(e)) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "stock subscriber cannot connect; retrying");
                }
                Err(Listen::Connect(_)) => {}
            }
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(SUBSCRIBE_RETRY_MAX);
        }
    }

    /// Re-reads every campaign on the board (after announcements may have been missed).
    async fn refresh_all(&self) {
        for (id, e) in self.board.all() {
            if let Err(err) = self.refresh(&id, &e, false).await {
                tracing::warn!(campaign = id, error = %err, "stock re-read failed");
            }
        }
    }
}

const SUBSCRIBE_RETRY_MIN: Duration = Duration::from_millis(50);
const SUBSCRIBE_RETRY_MAX: Duration = Duration::from_millis(250);

enum Listen {
    Connect(anyhow::Error),
    Lost(anyhow::Error),
}

async fn listen(url: &str, me: &std::sync::Weak<StockKeeper>) -> Result<(), Listen> {
    use futures::StreamExt;
    let connect = async {
        let mut pubsub = crate::redis_conn::tls::client(url)?
            .get_async_pubsub()
            .await?;
        pubsub.subscribe(CHANNEL).await?;
        anyhow::Ok(pubsub)
    };
    let pubsub = tokio::time::timeout(crate::redis_conn::link::CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| Listen::Connect(anyhow::anyhow!("connecting timed out")))?
        .map_err(Listen::Connect)?;
    tracing::info!(channel = CHANNEL, "stock subscriber listening");
    if let Some(keeper) = me.upgrade() {
        keeper.refresh_all().await;
    }
    let mut messages = pubsub.into_on_message();
    while let Some(msg) = messages.next().await {
        let Some(keeper) = me.upgrade() else {
            return Ok(());
        };
        let campaign: String = msg
            .get_payload()
            .map_err(|e| Listen::Lost(anyhow::Error::from(e)))?;
        if let Some(e) = keeper.board.get(&campaign) {
            if let Err(err) = keeper.refresh(&campaign, &e, false).await {
                tracing::warn!(campaign, error = %err, "re-reading an announced campaign failed");
            }
        }
    }
    Err(Listen::Lost(anyhow::anyhow!("the subscription ended")))
}
