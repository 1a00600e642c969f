//! A campaign's waiting room settings (`"waiting_room"` of `POST /v1/campaigns`), and the
//! answers of `POST /v1/campaigns/{id}/queue` and `GET /v1/campaigns/{id}/queue/{user_id}`.
//!
//! Part of the campaign's immutable definition: it is written with the campaign and never
//! changes, so every instance may keep it once read (docs/WAITING_ROOM.md).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Error;

/// Highest `admit_per_second`.
pub const MAX_ADMIT_PER_SECOND: u64 = 100_000;
/// Longest `ticket_seconds`.
pub const MAX_TICKET_SECONDS: u64 = 86_400;
/// `ticket_seconds` when none is given.
pub const DEFAULT_TICKET_SECONDS: u32 = 300;

/// `waiting_room` as it arrives on the wire.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitingRoomBody {
    /// Users admitted per second, deployment-wide (1–100,000).
    #[schema(minimum = 1, maximum = 100_000)]
    pub admit_per_second: Option<u64>,
    /// How long a ticket lets its user claim, from the user's admission (1–86,400; default
    /// 300).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 86_400)]
    pub ticket_seconds: Option<u64>,
    /// Whether the pre-queue is shuffled at `starts_at` (default true); false keeps join
    /// order.
    #[serde(default)]
    pub shuffle: Option<bool>,
}

/// A campaign's waiting room, validated; `GET /v1/campaigns/{id}` shows it as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitingRoom {
    pub admit_per_second: u32,
    pub ticket_seconds: u32,
    pub shuffle: bool,
}

impl TryFrom<WaitingRoomBody> for WaitingRoom {
    type Error = Error;

    fn try_from(b: WaitingRoomBody) -> Result<Self, Error> {
        let rate = b
            .admit_per_second
            .ok_or_else(|| Error::invalid("waiting_room.admit_per_second is required"))?;
        if !(1..=MAX_ADMIT_PER_SECOND).contains(&rate) {
            return Err(Error::invalid(format!(
                "waiting_room.admit_per_second must be between 1 and {MAX_ADMIT_PER_SECOND}, got {rate}"
            )));
        }
        let ticket = b
            .ticket_seconds
            .unwrap_or(u64::from(DEFAULT_TICKET_SECONDS));
        if !(1..=MAX_TICKET_SECONDS).contains(&ticket) {
            return Err(Error::invalid(format!(
                "waiting_room.ticket_seconds must be between 1 and {MAX_TICKET_SECONDS}, got {ticket}"
            )));
        }
        Ok(WaitingRoom {
            admit_per_second: rate as u32,
            ticket_seconds: ticket as u32,
            shuffle: b.shuffle.unwrap_or(true),
        })
    }
}

impl WaitingRoom {
    /// The ledger's form (a JSON object), read back by [`WaitingRoom::from_ledger`].
    pub fn to_ledger(&self) -> String {
        serde_json::to_string(self).expect("a plain struct serialises")
    }

    pub fn from_ledger(s: &str) -> anyhow::Result<Self> {
        Ok(serde_json::from_str(s)?)
    }

    /// Microseconds between two admissions, rounded up so the rate is never exceeded.
    pub fn spacing_us(&self) -> i64 {
        (1_000_000 + i64::from(self.admit_per_second) - 1) / i64::from(self.admit_per_second)
    }
}

/// `POST /v1/campaigns/{id}/queue`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"user_id": "u-1"}))]
pub struct JoinRequest {
    pub user_id: String,
}

/// Where a user stands in a campaign's waiting room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RoomAnswer {
    /// Joined before `starts_at`: places are drawn at `starts_at`.
    Prequeue { starts_at: Option<DateTime<Utc>> },
    /// In line: `position` 1 is next.
    Waiting {
        position: u64,
        estimated_wait_ms: u64,
    },
    /// Admitted: send `ticket` as `X-Seckill-Ticket` with each claim until
    /// `ticket_expires_at`.
    Admitted {
        ticket: String,
        admitted_at: DateTime<Utc>,
        ticket_expires_at: DateTime<Utc>,
    },
    /// The campaign sold out (or stopped selling) before this user's turn.
    SoldOut,
}
