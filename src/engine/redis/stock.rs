//! The scale-out instance's stock board: how each `seckill serve` learns, without asking Redis
//! per request, that a campaign is sold out — and learns promptly when it no longer is.
//!
//! It keeps the contract of [`crate::guard::soldout`]:
//!
//! - **claims**: a `sold_out` answer of the claim script carries the remaining stock; when it is
//!   0, the instance registers the campaign (its facts from the gate), loads every holder from
//!   `{c:<id>}:users` (a holder must hear `already_claimed`, never the fast `sold_out`) and only
//!   then publishes "0 left". A `won` answer adds the winner as a holder.
//! - **restock, cancel, status change** through any instance: once the gate applied it, that
//!   instance re-reads the campaign and `PUBLISH`es its id on [`CHANNEL`]; every instance
//!   subscribes on a dedicated connection (pub/sub cannot share the multiplexed one) and
//!   re-reads the campaign from Redis when it hears an id.
//! - **lost messages** (a subscriber reconnecting, a Sentinel deployment without a subscriber,
//!   a claim answer overtaken by a restock): every `max_staleness` each instance re-reads every
//!   campaign it believes sold out (one `HMGET` + `HLEN` per such campaign, never per request),
//!   reloading holders when their count changed. A stale `sold_out` therefore outlives a
//!   restock by at most `max_staleness` plus one round trip.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;

use super::conn::{RedisConn, RedisTarget};
use super::keys::Keys;
use crate::guard::soldout::{StockBoard, StockEntry, StockFacts};

/// The pub/sub channel on which instances announce a campaign whose stock may have grown.
pub const CHANNEL: &str = "seckill:stock";

pub struct StockKeeper {
    board: Arc<StockBoard>,
    conn: RedisConn,
    /// One campaign loads its holders at a time; concurrent sold-out answers skip the load.
    loading: tokio::sync::Mutex<()>,
}

impl StockKeeper {
    pub fn new(conn: RedisConn) -> Arc<Self> {
        Arc::new(Self {
            board: StockBoard::new(),
            conn,
            loading: tokio::sync::Mutex::new(()),
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
    /// stock is read and before it is published — when `holders`, or when their count
    /// changed — so everyone who won before the stock read is known before "0 left" is.
    pub async fn refresh(
        &self,
        campaign: &str,
        entry: &StockEntry,
        holders: bool,
    ) -> redis::RedisResult<()> {
        let k = Keys::new(campaign);
        let mut conn = self.conn.clone();
        let (remaining, status): (Option<u64>, Option<String>) =
            conn.hget(k.meta(), &["remaining", "status"]).await?;
        let Some(remaining) = remaining else {
            entry.publish(0, false);
            return Ok(());
        };
        let count: usize = conn.hlen(k.users()).await?;
        if holders || count != entry.holder_count() {
            // HSCAN in pages, not HKEYS: a million holders never sit in memory as strings.
            let mut cursor = 0u64;
            loop {
                let (next, page): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                    .arg(k.users())
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await?;
                for (user, _) in &page {
                    entry.add_holder(user);
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
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

    /// Re-reads every campaign believed sold out (or not yet published), every `every`.
    pub fn spawn_refresher(self: &Arc<Self>, every: Duration) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(me) = me.upgrade() else { return };
                for (id, e) in me.board.all() {
                    if e.remaining() == 0 {
                        if let Err(err) = me.refresh(&id, &e, false).await {
                            tracing::warn!(campaign = id, error = %err, "stock re-read failed");
                        }
                    }
                }
            }
        });
    }

    /// Listens on [`CHANNEL`] over its own connection (reconnecting after errors) until the
    /// keeper is dropped. Sentinel deployments have no subscriber: the refresher bounds them.
    pub fn spawn_subscriber(self: &Arc<Self>, target: &RedisTarget) {
        if target.sentinel_master.is_some() {
            return;
        }
        // A cluster broadcasts PUBLISH to every node, so one seed node hears every message.
        let url = target.urls[0].clone();
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                if me.upgrade().is_none() {
                    return;
                }
                if let Err(e) = listen(&url, &me).await {
                    tracing::warn!(error = %e, "stock subscriber lost its connection; retrying");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
}

async fn listen(url: &str, me: &std::sync::Weak<StockKeeper>) -> anyhow::Result<()> {
    use futures::StreamExt;
    let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
    pubsub.subscribe(CHANNEL).await?;
    tracing::info!(channel = CHANNEL, "stock subscriber listening");
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        let Some(keeper) = me.upgrade() else {
            return Ok(());
        };
        let campaign: String = msg.get_payload()?;
        if let Some(e) = keeper.board.get(&campaign) {
            if let Err(err) = keeper.refresh(&campaign, &e, false).await {
                tracing::warn!(campaign, error = %err, "re-reading an announced campaign failed");
            }
        }
    }
    anyhow::bail!("the subscription ended")
}
