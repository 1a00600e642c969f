//! The event feed: every order transition and campaign change, in the ledger's order, for the
//! shop's own systems (`GET /v1/events`, `seckill events tail`).
//!
//! The ledger writes each event in the transaction of its change (the transactional outbox;
//! `ledger::feed`), so the feed can neither lose an event of a change that committed nor show
//! one of a change that rolled back. This module reads it: a page after a cursor, and a long
//! poll that answers as soon as a new event is readable. One upkeep task per instance numbers
//! what PostgreSQL's concurrent writers committed (every 25 ms, one numbering at a time across
//! all instances), publishes how far the feed goes, which wakes the long polls, and removes
//! events older than the retention.
//!
//! Every answer is read from the ledger itself; the published head only says when to look
//! again, so an upkeep task that falls behind or restarts delays a long poll and never makes
//! one skip or repeat an event.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::domain::{Error, EventFilter, EventPage};
use crate::ledger::feed::{FeedHead, FeedRead};
use crate::ledger::Ledger;
use crate::supervise::Supervisor;

/// How often the upkeep numbers new events and publishes the head.
pub const TICK: Duration = Duration::from_millis(25);
/// How often retention runs at most (more often under a retention shorter than 4 minutes).
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Events removed per retention transaction.
const PRUNE_BATCH: u32 = 10_000;

/// The feed over one ledger.
pub struct Feed {
    ledger: Arc<dyn Ledger>,
    head: watch::Sender<FeedHead>,
    retention: Duration,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("head", &*self.head.borrow())
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl Feed {
    pub fn new(ledger: Arc<dyn Ledger>, retention: Duration) -> Arc<Feed> {
        Arc::new(Feed {
            ledger,
            head: watch::Sender::new(FeedHead::default()),
            retention,
        })
    }

    /// The position of the newest readable event.
    pub async fn head(&self) -> anyhow::Result<u64> {
        Ok(self.ledger.feed_head().await?.numbered)
    }

    /// The position retention removed events through.
    pub async fn pruned_through(&self) -> anyhow::Result<u64> {
        Ok(self.ledger.feed_head().await?.pruned_through)
    }

    /// The ledger the feed reads.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// Runs the upkeep under `supervisor` (restarted if it fails).
    pub fn spawn_upkeep(self: &Arc<Self>, supervisor: &Arc<Supervisor>) {
        let feed = Arc::downgrade(self);
        supervisor.spawn("event-feed", move |_| upkeep(feed.clone()));
    }

    /// One page of the feed after `filter.after`; with `wait_ms`, waits up to that long for a
    /// matching event when there is none yet.
    pub async fn page(&self, filter: &EventFilter) -> Result<EventPage, Error> {
        let deadline = Instant::now() + Duration::from_millis(filter.wait_ms);
        let mut heads = self.head.subscribe();
        let mut after = filter.after;
        loop {
            let head = self.ledger.feed_head().await.map_err(read_failed)?;
            let from = after.unwrap_or(head.pruned_through);
            if from < head.pruned_through {
                return Err(gone(from, head.pruned_through));
            }
            if from > head.numbered {
                return Err(Error::invalid(format!(
                    "after {from} is not a cursor of this feed: its newest event is {}",
                    head.numbered
                )));
            }
            let read = FeedRead {
                after: from,
                upto: head.numbered,
                limit: filter.limit,
                campaign: filter.campaign.as_deref(),
                kind: filter.kind,
            };
            let events = self.ledger.feed(&read).await.map_err(read_failed)?;
            // Retention may have removed events after `from` between the two reads: then the
            // page has a hole, and the answer is the 410 it would have been.
            let pruned = self
                .ledger
                .feed_head()
                .await
                .map_err(read_failed)?
                .pruned_through;
            if from < pruned {
                return Err(gone(from, pruned));
            }
            // A full page ends at its last event; a short one has read through the head.
            let next = match events.len() == filter.limit as usize {
                true => events.last().map(|e| e.cursor.clone()),
                false => None,
            }
            .unwrap_or_else(|| head.numbered.to_string());
            if !events.is_empty() || Instant::now() >= deadline {
                return Ok(EventPage {
                    events,
                    next_cursor: next,
                });
            }
            after = Some(head.numbered);
            let seen = head.numbered;
            let newer = heads.wait_for(|h| h.numbered > seen);
            let _ = tokio::time::timeout_at(deadline, newer).await;
        }
    }
}

fn gone(from: u64, pruned: u64) -> Error {
    Error::Gone(format!(
        "cursor {from} is older than the oldest event kept: events up to {pruned} were removed \
         by retention; read again from after={pruned} (or without after)"
    ))
}

fn read_failed(e: anyhow::Error) -> Error {
    Error::unavailable("reading the event feed failed", e)
}

/// Numbers, publishes and prunes every [`TICK`] until the feed is dropped. A ledger that
/// cannot be read or written (PostgreSQL restarting, a full disk) is waited out, never a reason
/// to stop: claims go on meanwhile, and the long polls only answer later.
async fn upkeep(feed: std::sync::Weak<Feed>) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_prune = Instant::now();
    let mut failing = false;
    loop {
        tick.tick().await;
        let Some(feed) = feed.upgrade() else {
            return Ok(());
        };
        let step = async {
            feed.ledger.number_feed().await?;
            let prune_due = Instant::now() >= next_prune;
            // The head is read for the long polls waiting on it, and for the retention; with
            // neither, a tick costs the embedded ledger nothing.
            if feed.head.receiver_count() == 0 && !prune_due {
                return anyhow::Ok(());
            }
            let head = feed.ledger.feed_head().await?;
            feed.head
                .send_if_modified(|h| std::mem::replace(h, head) != head);
            if prune_due {
                let every = (feed.retention / 4).clamp(TICK, PRUNE_EVERY);
                next_prune = Instant::now() + every;
                let before = crate::clock::now() - feed.retention;
                let mut was = head.pruned_through;
                loop {
                    let through = feed.ledger.prune_feed(before, PRUNE_BATCH).await?;
                    if through < was + PRUNE_BATCH as u64 {
                        break;
                    }
                    was = through;
                }
            }
            anyhow::Ok(())
        };
        match step.await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the event feed's upkeep works again");
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %format!("{e:#}"), "the event feed's upkeep failed; retrying");
                }
                failing = true;
                drop(feed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
