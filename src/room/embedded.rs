//! The embedded deployment's rooms: in memory, every join written to SQLite first.
//!
//! A room's whole state is a function of its joins in arrival order (user, time) and the
//! deployment's key: the pre-queue's order is the users' shuffle scores, and every later
//! joiner's slot follows from its join time and the slot before it ([`super::schedule`]). So
//! the ledger keeps only the joins (`room_members`), and a restart replays them into the same
//! places. Joins go through one task that writes each batch in one transaction and changes
//! memory only after the commit: a place is told only once it is on disk, and a failed write
//! (a full disk) leaves memory as the disk is.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::schedule::{self, Place};
use super::{RoomDef, RoomStore, Stats};
use crate::domain::{Error, Status};
use crate::engine::backend::Backend;
use crate::ledger::{JoinRow, SqliteLedger};

/// Most joins written in one transaction.
const BATCH: usize = 2048;

enum Member {
    /// In the pre-queue; `rank` (from 1) once the pre-queue is frozen.
    Pre { rank: u64 },
    /// A later joiner: its slot is `late[idx]`.
    Late { idx: usize },
}

#[derive(Default)]
struct Room {
    members: HashMap<Arc<str>, Member>,
    /// The pre-queue by score, until frozen.
    pre: Vec<(u64, Arc<str>)>,
    /// Size of the frozen pre-queue.
    frozen: Option<u64>,
    /// Slots of the later joiners, ascending.
    late: Vec<i64>,
    tail: Option<i64>,
    last_seq: i64,
    last_joined: i64,
}

impl Room {
    /// Freezes the pre-queue: ranks by (score, user), as a Redis sorted set orders it.
    fn freeze(&mut self, def: &RoomDef) -> u64 {
        if let Some(q) = self.frozen {
            return q;
        }
        let mut pre = std::mem::take(&mut self.pre);
        pre.sort_unstable();
        for (i, (_, user)) in pre.iter().enumerate() {
            if let Some(Member::Pre { rank }) = self.members.get_mut(user) {
                *rank = i as u64 + 1;
            }
        }
        let q = pre.len() as u64;
        self.frozen = Some(q);
        self.tail = schedule::pre_tail(def.starts_at, q, def.spacing());
        q
    }

    fn started(&self, def: &RoomDef, now: i64) -> bool {
        self.frozen.is_some() || def.starts_at.is_none_or(|s| now >= s)
    }

    /// Adds a join (committed, or read back from the ledger).
    fn apply(&mut self, def: &RoomDef, user: Arc<str>, seq: i64, at: i64, score: u64) {
        self.last_seq = seq;
        self.last_joined = at;
        if !self.started(def, at) {
            let score = if def.room.shuffle { score } else { seq as u64 };
            self.pre.push((score, user.clone()));
            self.members.insert(user, Member::Pre { rank: 0 });
            return;
        }
        self.freeze(def);
        let slot = schedule::next_slot(at, self.tail, def.spacing());
        self.tail = Some(slot);
        self.late.push(slot);
        self.members.insert(
            user,
            Member::Late {
                idx: self.late.len() - 1,
            },
        );
    }

    /// `user`'s place at `now`, before the sold-out check.
    fn place(&mut self, def: &RoomDef, user: &str, now: i64) -> Option<Place> {
        let sp = def.spacing();
        let started = self.started(def, now);
        let q = if started { self.freeze(def) } else { 0 };
        let admitted_pre = schedule::pre_admitted(def.starts_at, q, now, sp);
        match self.members.get(user)? {
            Member::Pre { .. } if !started => Some(Place::Prequeue),
            Member::Pre { rank } => {
                let (rank, starts) = (*rank, def.starts_at.unwrap_or(now));
                Some(Place::Line {
                    admit_at: schedule::pre_slot(starts, rank, sp),
                    ahead: rank.saturating_sub(admitted_pre + 1),
                    now,
                })
            }
            Member::Late { idx } => {
                let admit_at = self.late[*idx];
                let before = &self.late[..*idx];
                let admitted_late = before.partition_point(|s| *s <= now);
                let ahead = if admit_at <= now {
                    0
                } else {
                    (q - admitted_pre) + (before.len() - admitted_late) as u64
                };
                Some(Place::Line {
                    admit_at,
                    ahead,
                    now,
                })
            }
        }
    }
}

struct Join {
    def: RoomDef,
    user: String,
    score: u64,
    reply: oneshot::Sender<Result<Place, Error>>,
}

/// The rooms of the embedded deployment.
pub struct EmbeddedRooms {
    rooms: Arc<Mutex<HashMap<String, Room>>>,
    backend: Arc<dyn Backend>,
    joins: mpsc::Sender<Join>,
}

impl EmbeddedRooms {
    /// Replays every join the ledger holds, then takes new ones. `shuffle(campaign, user)`
    /// gives a user's pre-queue score, as [`super::Rooms`] does.
    pub async fn open(
        ledger: Arc<SqliteLedger>,
        backend: Arc<dyn Backend>,
        shuffle: impl Fn(&str, &str) -> u64 + Send + Sync + 'static,
    ) -> anyhow::Result<Arc<Self>> {
        let mut rooms: HashMap<String, Room> = HashMap::new();
        let mut defs: HashMap<String, Option<RoomDef>> = HashMap::new();
        let rows = ledger.room_members().await?;
        let joined = rows.len();
        for r in rows {
            if !defs.contains_key(&r.campaign_id) {
                let def = room_def(&*backend, &r.campaign_id).await?;
                defs.insert(r.campaign_id.clone(), def);
            }
            let Some(def) = &defs[&r.campaign_id] else {
                anyhow::bail!("joins of campaign {:?}, which has no room", r.campaign_id);
            };
            let score = shuffle(&r.campaign_id, &r.user_id);
            rooms.entry(r.campaign_id.clone()).or_default().apply(
                def,
                r.user_id.into(),
                r.seq,
                r.joined_at,
                score,
            );
        }
        tracing::info!(rooms = rooms.len(), joined, "waiting rooms recovered");
        let rooms = Arc::new(Mutex::new(rooms));
        let (tx, rx) = mpsc::channel(BATCH * 4);
        tokio::spawn(writer(ledger, rooms.clone(), rx));
        Ok(Arc::new(Self {
            rooms,
            backend,
            joins: tx,
        }))
    }

    /// The place, with the sold-out check for a user not admitted yet.
    async fn checked(&self, def: &RoomDef, place: Option<Place>) -> Result<Option<Place>, Error> {
        match place {
            Some(Place::Line { admit_at, now, .. })
                if admit_at > now && self.sold_out(def, now).await? =>
            {
                Ok(Some(Place::SoldOut))
            }
            p => Ok(p),
        }
    }

    async fn sold_out(&self, def: &RoomDef, now: i64) -> Result<bool, Error> {
        let v = self.backend.campaign(&def.campaign).await?;
        Ok(v.remaining == 0
            || v.status == Status::Closed
            || v.ends_at.is_some_and(|e| now >= e.timestamp_micros()))
    }
}

async fn room_def(backend: &dyn Backend, id: &str) -> anyhow::Result<Option<RoomDef>> {
    let v = backend.campaign(id).await?;
    Ok(v.waiting_room.map(|room| RoomDef {
        campaign: id.to_owned(),
        room,
        starts_at: v.starts_at.map(|t| t.timestamp_micros()),
    }))
}

fn now_us() -> i64 {
    crate::domain::now().timestamp_micros()
}

#[async_trait]
impl RoomStore for EmbeddedRooms {
    async fn join(&self, def: &RoomDef, user: &str, score: u64) -> Result<Place, Error> {
        let known = {
            let mut rooms = self.rooms.lock();
            rooms
                .get_mut(&def.campaign)
                .and_then(|r| r.place(def, user, now_us()))
        };
        if let Some(p) = known {
            return Ok(self.checked(def, Some(p)).await?.expect("a member"));
        }
        if self.sold_out(def, now_us()).await? {
            return Ok(Place::SoldOut);
        }
        let (reply, answer) = oneshot::channel();
        let join = Join {
            def: def.clone(),
            user: user.to_owned(),
            score,
            reply,
        };
        self.joins
            .send(join)
            .await
            .map_err(|_| Error::Unavailable("the waiting room is shutting down".into()))?;
        let place = answer
            .await
            .map_err(|_| Error::Unavailable("the waiting room is shutting down".into()))??;
        Ok(self.checked(def, Some(place)).await?.expect("a member"))
    }

    async fn status(&self, def: &RoomDef, user: &str) -> Result<Option<Place>, Error> {
        let place = {
            let mut rooms = self.rooms.lock();
            rooms
                .get_mut(&def.campaign)
                .and_then(|r| r.place(def, user, now_us()))
        };
        self.checked(def, place).await
    }

    async fn stats(&self, def: &RoomDef) -> Result<Stats, Error> {
        let now = now_us();
        let mut rooms = self.rooms.lock();
        let Some(room) = rooms.get_mut(&def.campaign) else {
            return Ok(Stats {
                now,
                ..Stats::default()
            });
        };
        let joined = room.members.len() as u64;
        let admitted = if room.started(def, now) {
            let q = room.freeze(def);
            schedule::pre_admitted(def.starts_at, q, now, def.spacing())
                + room.late.partition_point(|s| *s <= now) as u64
        } else {
            0
        };
        Ok(Stats {
            joined,
            admitted,
            tail: room.tail,
            now,
        })
    }
}

/// Writes joins in batches, then makes them visible and answers them.
async fn writer(
    ledger: Arc<SqliteLedger>,
    rooms: Arc<Mutex<HashMap<String, Room>>>,
    mut rx: mpsc::Receiver<Join>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let now = now_us();
        // Decide each new member's row; a user twice in the batch gets one.
        let mut rows: Vec<(JoinRow, usize)> = Vec::new();
        {
            let mut rooms = rooms.lock();
            let mut next: HashMap<&str, (i64, i64)> = HashMap::new();
            let mut seen: HashMap<(&str, &str), ()> = HashMap::new();
            for (i, j) in batch.iter().enumerate() {
                let room = rooms.entry(j.def.campaign.clone()).or_default();
                if room.members.contains_key(j.user.as_str())
                    || seen.insert((&j.def.campaign, &j.user), ()).is_some()
                {
                    continue;
                }
                let (seq, at) = next
                    .entry(&j.def.campaign)
                    .or_insert((room.last_seq, room.last_joined.max(now)));
                *seq += 1;
                rows.push((
                    JoinRow {
                        campaign_id: j.def.campaign.clone(),
                        user_id: j.user.clone(),
                        seq: *seq,
                        joined_at: *at,
                    },
                    i,
                ));
            }
        }
        let written: Vec<JoinRow> = rows.iter().map(|(r, _)| r.clone()).collect();
        let saved = if written.is_empty() {
            Ok(())
        } else {
            ledger.room_joins(&written).await
        };
        let mut rooms = rooms.lock();
        if let Err(e) = &saved {
            tracing::error!(error = %format!("{e:#}"), joins = written.len(), "waiting room joins not written");
        } else {
            for (r, i) in &rows {
                let j = &batch[*i];
                rooms.entry(r.campaign_id.clone()).or_default().apply(
                    &j.def,
                    r.user_id.as_str().into(),
                    r.seq,
                    r.joined_at,
                    j.score,
                );
            }
        }
        let now = now_us();
        for j in batch.drain(..) {
            let place = rooms
                .get_mut(&j.def.campaign)
                .and_then(|r| r.place(&j.def, &j.user, now));
            let answer = match (place, &saved) {
                (Some(p), _) => Ok(p),
                (None, Err(_)) => Err(Error::not_committed("the join was not written")),
                (None, Ok(())) => Err(Error::Unavailable("the join was lost".into())),
            };
            let _ = j.reply.send(answer);
        }
    }
}
