//! The waiting room: a fair line in front of a sale (docs/WAITING_ROOM.md).
//!
//! Whoever's packet lands first wins a flash sale without one: the buyer next to the data
//! centre, or the bot firing 50 claims a millisecond. A campaign created with `waiting_room`
//! instead lets users join a line; everyone who joined before `starts_at` (the pre-queue) is
//! placed in an order drawn from the deployment's secret key, later joiners queue behind in
//! arrival order, and users are admitted at most `admit_per_second` per second
//! ([`schedule`]). An admitted user gets a signed [`ticket`], and a claim on such a campaign
//! without a valid ticket is refused (403 `not_admitted`) before it reaches the engine.
//!
//! The rooms live where each deployment keeps its gate: in process over SQLite
//! ([`embedded`]), or in Redis in the campaign's slot, one script per step ([`redis`]). This
//! module is what both share: the settings cache, the shuffle, the answers and the tickets.

pub mod embedded;
pub mod redis;
pub mod schedule;
pub mod ticket;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use parking_lot::RwLock;
use sha2::Sha256;

use crate::domain::{validate_user_id, Error, RoomAnswer, WaitingRoom};
use crate::engine::backend::Backend;
use schedule::Place;
use ticket::{TicketError, Tickets};

/// Most rooms `/metrics` and the dashboard show (a label set bounded like the campaigns').
pub const MAX_SHOWN: usize = 100;

/// What a store needs to know of a campaign's room: fixed once the campaign exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomDef {
    pub campaign: String,
    pub room: WaitingRoom,
    /// µs since the epoch; `None`: no pre-queue, everyone queues in arrival order.
    pub starts_at: Option<i64>,
}

impl RoomDef {
    pub fn spacing(&self) -> i64 {
        self.room.spacing_us()
    }
}

/// Where the rooms are kept.
#[async_trait]
pub trait RoomStore: Send + Sync + 'static {
    /// Puts `user` in line (once: joining again finds the same place). `score` orders the
    /// pre-queue when the room shuffles.
    async fn join(&self, def: &RoomDef, user: &str, score: u64) -> Result<Place, Error>;

    /// `user`'s place; `None` if it never joined.
    async fn status(&self, def: &RoomDef, user: &str) -> Result<Option<Place>, Error>;

    /// How many joined and how many are admitted by now, and the last slot given.
    async fn stats(&self, def: &RoomDef) -> Result<Stats, Error>;
}

/// A room's figures at `now` (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub joined: u64,
    pub admitted: u64,
    pub tail: Option<i64>,
    pub now: i64,
}

/// A room as `/metrics` and the dashboard show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RoomFigures {
    pub campaign: String,
    pub admit_per_second: u32,
    pub joined: u64,
    /// Joined and not admitted yet (the pre-queue included).
    pub waiting: u64,
    pub admitted: u64,
    /// Until the last user in line is admitted.
    pub estimated_wait_ms: u64,
}

/// The rooms of one instance: settings read once per campaign, the store, the keys.
pub struct Rooms {
    store: Arc<dyn RoomStore>,
    backend: Arc<dyn Backend>,
    tickets: Tickets,
    shuffle_key: [u8; 32],
    /// Campaigns seen, with their room (or none): a campaign's definition never changes.
    defs: RwLock<HashMap<String, Option<RoomDef>>>,
    /// Claims refused 403 `not_admitted` by this instance.
    refused: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Rooms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rooms(..)")
    }
}

impl Rooms {
    /// `key`: the deployment's room key, from its ledger.
    pub fn new(store: Arc<dyn RoomStore>, backend: Arc<dyn Backend>, key: [u8; 32]) -> Self {
        Self {
            store,
            backend,
            tickets: Tickets::new(derive(&key, b"seckill ticket v1")),
            shuffle_key: derive(&key, b"seckill shuffle v1"),
            defs: RwLock::new(HashMap::new()),
            refused: Default::default(),
        }
    }

    /// The pre-queue's scores of a deployment with room key `key`, for a store replaying its
    /// joins (the same scores [`Rooms::join`] gives).
    pub fn shuffle_fn(key: &[u8; 32]) -> impl Fn(&str, &str) -> u64 + Send + Sync + 'static {
        let k = derive(key, b"seckill shuffle v1");
        move |campaign, user| shuffle_score(&k, campaign, user)
    }

    /// The room of campaign `id`, if it has one; [`Error::NotFound`] if there is no campaign.
    pub async fn def(&self, id: &str) -> Result<Option<RoomDef>, Error> {
        if let Some(d) = self.defs.read().get(id) {
            return Ok(d.clone());
        }
        let def = match self.backend.waiting_room(id).await? {
            None => None,
            Some(room) => {
                let view = self.backend.campaign(id).await?;
                Some(RoomDef {
                    campaign: id.to_owned(),
                    room,
                    starts_at: view.starts_at.map(|t| t.timestamp_micros()),
                })
            }
        };
        self.defs.write().insert(id.to_owned(), def.clone());
        Ok(def)
    }

    async fn room(&self, id: &str) -> Result<RoomDef, Error> {
        self.def(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("campaign '{id}' has no waiting room")))
    }

    /// `POST /v1/campaigns/{id}/queue`.
    pub async fn join(&self, id: &str, user: &str) -> Result<RoomAnswer, Error> {
        validate_user_id(user)?;
        let def = self.room(id).await?;
        let score = if def.room.shuffle {
            shuffle_score(&self.shuffle_key, id, user)
        } else {
            0
        };
        let place = self.store.join(&def, user, score).await?;
        Ok(self.answer(&def, user, place))
    }

    /// `GET /v1/campaigns/{id}/queue/{user_id}`.
    pub async fn status(&self, id: &str, user: &str) -> Result<RoomAnswer, Error> {
        validate_user_id(user)?;
        let def = self.room(id).await?;
        match self.store.status(&def, user).await? {
            Some(place) => Ok(self.answer(&def, user, place)),
            None => Err(Error::NotFound(format!(
                "user '{user}' has not joined the waiting room of campaign '{id}'"
            ))),
        }
    }

    fn answer(&self, def: &RoomDef, user: &str, place: Place) -> RoomAnswer {
        match place {
            Place::Prequeue => RoomAnswer::Prequeue {
                starts_at: def
                    .starts_at
                    .and_then(DateTime::<Utc>::from_timestamp_micros),
            },
            Place::SoldOut => RoomAnswer::SoldOut,
            Place::Line { admit_at, now, .. } if admit_at <= now => {
                // Rounded up, so nobody reads an admission before `starts_at`.
                let admitted_ms = (admit_at + 999).div_euclid(1000);
                let expires_ms = admitted_ms + i64::from(def.room.ticket_seconds) * 1000;
                RoomAnswer::Admitted {
                    ticket: self.tickets.sign(&def.campaign, user, expires_ms),
                    admitted_at: DateTime::from_timestamp_millis(admitted_ms).unwrap_or_default(),
                    ticket_expires_at: DateTime::from_timestamp_millis(expires_ms)
                        .unwrap_or_default(),
                }
            }
            Place::Line {
                admit_at,
                ahead,
                now,
            } => RoomAnswer::Waiting {
                position: ahead + 1,
                estimated_wait_ms: ((admit_at - now) as u64).div_ceil(1000),
            },
        }
    }

    /// Whether a claim by `user` on campaign `id` may go on: always without a room, with a
    /// room only with a valid ticket. [`Error::NotFound`] for a campaign that does not exist
    /// (so no claim reaches a campaign whose room this instance has not read).
    pub async fn admit(
        &self,
        id: &str,
        user: &str,
        ticket: Option<&str>,
    ) -> Result<Result<(), TicketError>, Error> {
        // The claim path: a campaign already seen is checked under the cache's read lock,
        // without copying its settings.
        if let Some(d) = self.defs.read().get(id) {
            return Ok(self.check(d.as_ref(), user, ticket));
        }
        let def = self.def(id).await?;
        Ok(self.check(def.as_ref(), user, ticket))
    }

    fn check(
        &self,
        def: Option<&RoomDef>,
        user: &str,
        ticket: Option<&str>,
    ) -> Result<(), TicketError> {
        let Some(def) = def else { return Ok(()) };
        let checked = self.tickets.check(
            ticket,
            &def.campaign,
            user,
            crate::domain::now().timestamp_millis(),
        );
        if checked.is_err() {
            self.refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        checked
    }

    /// Claims this instance refused for their ticket.
    pub fn tickets_refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The figures of the rooms among campaigns `ids` and those this instance has served,
    /// at most [`MAX_SHOWN`] by id; campaigns without one are skipped, as is a room that cannot
    /// be read now.
    pub async fn figures(&self, ids: &[String]) -> Vec<RoomFigures> {
        let mut wanted: std::collections::BTreeSet<String> = self
            .defs
            .read()
            .iter()
            .filter(|(_, d)| d.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        wanted.extend(ids.iter().cloned());
        let mut all = Vec::new();
        for id in wanted.iter().take(MAX_SHOWN) {
            let Ok(Some(def)) = self.def(id).await else {
                continue;
            };
            let Ok(s) = self.store.stats(&def).await else {
                continue;
            };
            all.push(RoomFigures {
                campaign: def.campaign.clone(),
                admit_per_second: def.room.admit_per_second,
                joined: s.joined,
                waiting: s.joined.saturating_sub(s.admitted),
                admitted: s.admitted,
                estimated_wait_ms: s
                    .tail
                    .map_or(0, |t| (t - s.now).max(0) as u64)
                    .div_ceil(1000),
            });
        }
        all
    }

    /// Sets the rooms' series of `/metrics` for campaigns `ids`; the figures they were set
    /// from.
    pub async fn refresh_metrics(
        &self,
        ids: &[String],
        registry: &crate::telemetry::Registry,
    ) -> Vec<RoomFigures> {
        use crate::telemetry::catalog as c;
        registry
            .counter(c::ROOM_TICKETS_REFUSED, Vec::new())
            .absolute(self.tickets_refused());
        let figures = self.figures(ids).await;
        for f in &figures {
            let id = &f.campaign;
            registry
                .campaign_gauge(c::ROOM_JOINED, id)
                .set(f.joined as f64);
            registry
                .campaign_gauge(c::ROOM_WAITING, id)
                .set(f.waiting as f64);
            registry
                .campaign_gauge(c::ROOM_ADMITTED, id)
                .set(f.admitted as f64);
            registry
                .campaign_gauge(c::ROOM_WAIT, id)
                .set(f.estimated_wait_ms as f64 / 1000.0);
        }
        figures
    }
}

fn derive(key: &[u8; 32], label: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(label);
    mac.finalize().into_bytes().into()
}

/// A user's place in a shuffled pre-queue: 48 bits of a keyed hash, so nobody without the
/// key can predict or choose it, and exact in a Redis sorted set's double score.
pub fn shuffle_score(key: &[u8; 32], campaign: &str, user: &str) -> u64 {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(campaign.as_bytes());
    mac.update(b"\0");
    mac.update(user.as_bytes());
    let h = mac.finalize().into_bytes();
    u64::from_be_bytes([0, 0, h[0], h[1], h[2], h[3], h[4], h[5]])
}
