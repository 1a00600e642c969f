//! The embedded deployment's rooms: in memory, every join written to SQLite first.
//!
//! A room's whole state is a function of its joins in arrival order (user, time) and the
//! deployment's key: a join timed before `starts_at` is in the pre-queue, ordered by the
//! users' shuffle scores, and every later joiner's slot follows from its join time and the
//! slot before it ([`super::schedule`]). So the ledger keeps only the joins (`room_members`),
//! and a restart replays them into the same places.
//!
//! Joins go through one task that writes each batch in one transaction and changes memory
//! only after the commit: a place is told only once it is on disk, and a failed write (a full
//! disk) leaves memory as the disk is. Two rules keep the replay equal to what was told:
//! a join's time is read under its room's lock, after any freeze a reader made (so a join
//! after the freeze is never timed before `starts_at`); and while joins timed before
//! `starts_at` are being written, readers do not freeze the pre-queue (they answer
//! `prequeue` for those few milliseconds), so the frozen pre-queue holds every such join.
//! Each room has its own lock: the one sort of a large pre-queue at `starts_at` holds up only
//! that room.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};

use super::schedule::{self, Place};
use super::{RoomDef, RoomStore, Stats};
use crate::domain::{Error, Status};
use crate::engine::backend::Backend;
use crate::ledger::SqliteLedger;

mod writer;

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
    /// Joins timed before `starts_at` decided and not yet applied (being written).
    writing_pre: usize,
}

type Shared = Arc<Mutex<Room>>;

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

    /// Whether the line is drawn at `now`: frozen already, or past `starts_at` with no join
    /// timed before it still being written.
    fn started(&self, def: &RoomDef, now: i64) -> bool {
        self.frozen.is_some() || (def.starts_at.is_none_or(|s| now >= s) && self.writing_pre == 0)
    }

    /// Adds a join (committed, or read back from the ledger): in the pre-queue if timed
    /// before `starts_at`, else in line.
    fn apply(&mut self, def: &RoomDef, user: Arc<str>, seq: i64, at: i64, score: u64) {
        self.last_seq = seq;
        self.last_joined = self.last_joined.max(at);
        if self.frozen.is_none() && def.starts_at.is_some_and(|s| at < s) {
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
        let admitted_pre = if started {
            schedule::pre_admitted(def.starts_at, q, now, sp)
        } else {
            0
        };
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

    /// Times a new member's join at `now` (read under this room's lock).
    fn decide(&mut self, def: &RoomDef, now: i64, next_seq: i64) -> (i64, i64) {
        let mut at = now.max(self.last_joined);
        match def.starts_at {
            Some(s) if at < s && self.frozen.is_none() => self.writing_pre += 1,
            // Frozen by a reader whose clock read passed the start: this join comes after it.
            Some(s) if at < s => at = s,
            _ => {}
        }
        (next_seq, at)
    }
}

struct Join {
    def: RoomDef,
    user: String,
    score: u64,
    /// Taken once the join is answered (early, when its write's outcome is unknown).
    reply: Option<oneshot::Sender<Result<Place, Error>>>,
}

/// A user's pre-queue score in a campaign's room ([`super::Rooms::shuffle_fn`]).
type Shuffle = Arc<dyn Fn(&str, &str) -> u64 + Send + Sync>;

#[derive(Default)]
struct Rooms {
    all: RwLock<HashMap<String, Shared>>,
    /// A batch of joins whose write's outcome is unknown is being settled: until it is, new
    /// joins are refused at once rather than queued behind it, and a user the rooms do not
    /// know may be in that batch, so its status is not 404 but "read again".
    settling: std::sync::atomic::AtomicBool,
}

impl Rooms {
    fn settling(&self) -> bool {
        self.settling.load(std::sync::atomic::Ordering::Acquire)
    }

    fn get(&self, id: &str) -> Option<Shared> {
        self.all.read().get(id).cloned()
    }

    fn entry(&self, id: &str) -> Shared {
        if let Some(r) = self.get(id) {
            return r;
        }
        self.all.write().entry(id.to_owned()).or_default().clone()
    }
}

/// The rooms of the embedded deployment.
pub struct EmbeddedRooms {
    rooms: Arc<Rooms>,
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
        let shuffle: Shuffle = Arc::new(shuffle);
        let rooms = Arc::new(Rooms::default());
        let mut defs: HashMap<String, RoomDef> = HashMap::new();
        for id in ledger.room_campaigns().await? {
            let def = room_def(&*backend, &id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("joins of campaign {id:?}, which has no room"))?;
            defs.insert(id, def);
        }
        let mut current: Option<(Shared, &RoomDef)> = None;
        let joined = ledger
            .room_members(|r| {
                let def = defs
                    .get(&r.campaign_id)
                    .ok_or_else(|| anyhow::anyhow!("a join of an unknown room"))?;
                if current
                    .as_ref()
                    .is_none_or(|(_, d)| d.campaign != r.campaign_id)
                {
                    current = Some((rooms.entry(&r.campaign_id), def));
                }
                let (room, def) = current.as_ref().expect("just set");
                let score = shuffle(&r.campaign_id, &r.user_id);
                room.lock()
                    .apply(def, r.user_id.into(), r.seq, r.joined_at, score);
                Ok(())
            })
            .await?;
        tracing::info!(rooms = defs.len(), joined, "waiting rooms recovered");
        let (tx, rx) = mpsc::channel(BATCH * 4);
        tokio::spawn(writer::writer(ledger, rooms.clone(), shuffle, rx));
        Ok(Arc::new(Self {
            rooms,
            backend,
            joins: tx,
        }))
    }

    fn place(&self, def: &RoomDef, user: &str) -> Option<Place> {
        let room = self.rooms.get(&def.campaign)?;
        let mut room = room.lock();
        room.place(def, user, now_us())
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

/// The answer to a join or a read while a write's outcome is being settled.
fn settling() -> Error {
    Error::Unavailable(
        "the waiting room's disk failed at a commit and its last joins are being settled; \
         nothing was changed, join or read again shortly"
            .into(),
    )
}

fn now_us() -> i64 {
    crate::domain::now().timestamp_micros()
}

#[async_trait]
impl RoomStore for EmbeddedRooms {
    async fn join(&self, def: &RoomDef, user: &str, score: u64) -> Result<Place, Error> {
        if let Some(p) = self.place(def, user) {
            return Ok(self.checked(def, Some(p)).await?.expect("a member"));
        }
        if self.rooms.settling() {
            return Err(settling());
        }
        if self.sold_out(def, now_us()).await? {
            return Ok(Place::SoldOut);
        }
        let (reply, answer) = oneshot::channel();
        let join = Join {
            def: def.clone(),
            user: user.to_owned(),
            score,
            reply: Some(reply),
        };
        let closed = || Error::Unavailable("the waiting room is shutting down".into());
        self.joins.send(join).await.map_err(|_| closed())?;
        let place = answer.await.map_err(|_| closed())??;
        Ok(self.checked(def, Some(place)).await?.expect("a member"))
    }

    async fn status(&self, def: &RoomDef, user: &str) -> Result<Option<Place>, Error> {
        let place = self.place(def, user);
        if place.is_none() && self.rooms.settling() {
            return Err(settling());
        }
        self.checked(def, place).await
    }

    async fn stats(&self, def: &RoomDef) -> Result<Stats, Error> {
        let now = now_us();
        let Some(room) = self.rooms.get(&def.campaign) else {
            return Ok(Stats {
                now,
                ..Stats::default()
            });
        };
        let mut room = room.lock();
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
