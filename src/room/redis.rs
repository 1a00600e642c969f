//! The scale-out deployment's rooms: in Redis, in the campaign's slot (`{c:<id>}`), one
//! script per step (`lua/room.lua`), on the Redis server's clock. Every instance joins and
//! reads the same line, and the admission schedule is one per deployment, not per instance.
//!
//! What survives what: the room is Redis data like the gate's stock, kept by the same
//! persistence (AOF) and replicas; with `--redis-wait-replicas` a join is answered only once
//! that many replicas have it, like a claim, and a status read tells a place only once
//! replicas are known to have it and the pre-queue's freeze it rests on, so a failover cannot
//! take back a place that was told. A place is known to be on the replicas once a `WAIT` after
//! a step that read it succeeded: the step's answer names what it rested on, and a `mark`
//! records it in the room, so reads of confirmed places (nearly all of them) do not wait. A
//! ticket once issued needs nothing from Redis at all (docs/WAITING_ROOM.md, "What is
//! durable").

use std::sync::Arc;

use async_trait::async_trait;
use redis::Script;

use super::schedule::Place;
use super::{RoomDef, RoomStore, Stats};
use crate::domain::{Error, Status};
use crate::engine::backend::Backend;
use crate::engine::scale_out::{Health, SharedWait, WaitReplicas};
use crate::redis_conn::link::Pinned;
use crate::redis_conn::RedisConn;

pub struct RedisRooms {
    conn: RedisConn,
    script: Script,
    /// The engine, to bring back a campaign Redis lost (or learn it is over for good).
    backend: Arc<dyn Backend>,
    /// `--redis-wait-replicas`: a join is answered once these replicas have it (one `WAIT`
    /// for all the joins and reads queued before it).
    wait: Option<SharedWait>,
}

/// What one script call found.
enum Step {
    Found(Option<Place>, Unconfirmed),
    /// The campaign is not in the gate.
    Missing,
}

/// What an answer rests on that no replica is known to have (`room.lua`'s `q`, `slot` and `n`,
/// empty when known): the pre-queue's freeze of size `q`, a later joiner's `slot`, a
/// pre-queue of `pre` members.
#[derive(Debug, Default)]
struct Unconfirmed {
    q: String,
    slot: String,
    pre: String,
}

impl Unconfirmed {
    fn is_empty(&self) -> bool {
        self.q.is_empty() && self.slot.is_empty() && self.pre.is_empty()
    }
}

impl RedisRooms {
    pub fn new(conn: RedisConn, backend: Arc<dyn Backend>, wait: Option<WaitReplicas>) -> Self {
        Self {
            script: Script::new(include_str!("lua/room.lua")),
            backend,
            wait: wait.map(|w| SharedWait::start(w, conn.clone())),
            conn,
        }
    }

    /// One step; a campaign the gate lacks is first read through the engine, which puts it
    /// back from the ledger (then the step runs again) unless it is over for good (then the
    /// sale is: `sold_out`).
    async fn step(
        &self,
        def: &RoomDef,
        op: &str,
        user: &str,
        score: u64,
    ) -> Result<(Option<Place>, Unconfirmed), Error> {
        if let Step::Found(p, u) = self.once(def, op, user, score).await? {
            return Ok((p, u));
        }
        let view = self.backend.campaign(&def.campaign).await?;
        let now = crate::domain::now();
        if view.status == Status::Closed || view.ends_at.is_some_and(|e| now >= e) {
            return Ok((Some(Place::SoldOut), Unconfirmed::default()));
        }
        match self.once(def, op, user, score).await? {
            Step::Found(p, u) => Ok((p, u)),
            Step::Missing => Err(Error::Unavailable(format!(
                "campaign '{}' is not in the gate yet; retry shortly",
                def.campaign
            ))),
        }
    }

    /// One call of `room.lua` (its KEYS and ARGV are described there).
    async fn call(
        &self,
        def: &RoomDef,
        op: &str,
        user: &str,
        args: &[&str],
        context: &str,
    ) -> Result<Vec<redis::Value>, Error> {
        self.invocation(def, op, user, args)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| Error::unavailable(context, e))
    }

    /// `room.lua` with its KEYS and ARGV (described there).
    fn invocation(
        &self,
        def: &RoomDef,
        op: &str,
        user: &str,
        args: &[&str],
    ) -> redis::ScriptInvocation<'_> {
        let tag = format!("{{c:{}}}", def.campaign);
        let mut inv = self.script.prepare_invoke();
        inv.key(format!("{tag}:meta"))
            .key(format!("{tag}:room:pre"))
            .key(format!("{tag}:room:late"))
            .key(format!("{tag}:room"))
            .arg(op)
            .arg(user)
            .arg(args);
        inv
    }

    async fn once(&self, def: &RoomDef, op: &str, user: &str, score: u64) -> Result<Step, Error> {
        let score = if def.room.shuffle {
            score.to_string()
        } else {
            String::new()
        };
        let reply = self
            .call(
                def,
                op,
                user,
                &[&def.spacing().to_string(), &score],
                "the waiting room could not be reached in Redis",
            )
            .await?;
        let word = |i: usize| -> Option<String> {
            match reply.get(i)? {
                redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                redis::Value::SimpleString(s) => Some(s.clone()),
                redis::Value::Int(n) => Some(n.to_string()),
                _ => None,
            }
        };
        let num = |i: usize| -> Result<i64, Error> {
            word(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::Unavailable("a malformed waiting room reply".into()))
        };
        let mut unconfirmed = Unconfirmed::default();
        let place = match word(0).as_deref() {
            Some("line") => {
                unconfirmed.q = word(4).unwrap_or_default();
                unconfirmed.slot = word(5).unwrap_or_default();
                Place::Line {
                    admit_at: num(1)?,
                    ahead: num(2)?.max(0) as u64,
                    now: num(3)?,
                }
            }
            Some("prequeue") => {
                unconfirmed.pre = word(1).unwrap_or_default();
                Place::Prequeue
            }
            Some("sold_out") => Place::SoldOut,
            Some("unknown") => return Ok(Step::Found(None, unconfirmed)),
            Some("missing") => return Ok(Step::Missing),
            _ => return Err(Error::Unavailable("a malformed waiting room reply".into())),
        };
        Ok(Step::Found(Some(place), unconfirmed))
    }

    /// Records that replicas have what `u` names (after a `WAIT` that followed the step which
    /// named it, on the link's connection of `before`), so later reads of it need not wait.
    /// Sent on that same connection only: after a failover the mark must not land on a server
    /// the `WAIT` did not cover. A mark lost (an error, a failover) only makes a later read
    /// wait again.
    async fn mark(&self, def: &RoomDef, user: &str, u: &Unconfirmed, before: Option<Health>) {
        let (
            Some(link),
            Some(Health {
                up: true,
                generation,
            }),
        ) = (self.conn.link(), before)
        else {
            return;
        };
        if u.is_empty() {
            return;
        }
        let inv = self.invocation(def, "mark", user, &[&u.slot, &u.q, &u.pre]);
        let mut pinned = Pinned { link, generation };
        if let Err(e) = inv.invoke_async::<redis::Value>(&mut pinned).await {
            tracing::debug!(error = %e, campaign = %def.campaign, "marking a waiting room place as replicated failed");
        }
    }
}

#[async_trait]
impl RoomStore for RedisRooms {
    async fn join(&self, def: &RoomDef, user: &str, score: u64) -> Result<Place, Error> {
        let before = WaitReplicas::before(&self.conn);
        let (place, unconfirmed) = self.step(def, "join", user, score).await?;
        let place =
            place.ok_or_else(|| Error::Unavailable("a malformed waiting room reply".into()))?;
        // Every join waits, a repeated one too: its first answer may have been this 503.
        if let Some(wait) = &self.wait {
            wait.confirm(before).await.map_err(|e| {
                Error::OutcomeUnknown(format!(
                    "the join of '{user}' is not on a Redis replica yet ({e:#}); its place may \
                     or may not survive a failover: join again, it answers the user's place"
                ))
            })?;
            self.mark(def, user, &unconfirmed, before).await;
        }
        Ok(place)
    }

    /// Tells a place once replicas are known to have it: a read of a place no replica is
    /// known to have (a join answered 503, a freeze just written) waits as a join does.
    async fn status(&self, def: &RoomDef, user: &str) -> Result<Option<Place>, Error> {
        let before = WaitReplicas::before(&self.conn);
        let (place, unconfirmed) = self.step(def, "status", user, 0).await?;
        if let (Some(wait), false) = (&self.wait, unconfirmed.is_empty()) {
            wait.confirm(before).await.map_err(|e| {
                Error::Unavailable(format!(
                    "the place of '{user}' is not on a Redis replica yet ({e:#}); read it again \
                     shortly"
                ))
            })?;
            self.mark(def, user, &unconfirmed, before).await;
        }
        Ok(place)
    }

    async fn stats(&self, def: &RoomDef) -> Result<Stats, Error> {
        let reply = self
            .call(
                def,
                "stats",
                "",
                &[&def.spacing().to_string(), ""],
                "reading a waiting room from Redis failed",
            )
            .await?;
        let n = |i: usize| -> Option<i64> {
            match reply.get(i)? {
                redis::Value::Int(n) => Some(*n),
                redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            }
        };
        let bad = || Error::Unavailable("a malformed waiting room reply".into());
        Ok(Stats {
            joined: n(1).ok_or_else(bad)?.max(0) as u64,
            admitted: n(2).ok_or_else(bad)?.max(0) as u64,
            tail: n(3),
            now: n(4).ok_or_else(bad)?,
        })
    }
}
