//! Campaign definitions and the public campaign view.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::room::{WaitingRoom, WaitingRoomBody};
use super::validate::{self, validate_campaign_id, MAX_PER_USER_LIMIT, MAX_STOCK};
use super::Error;

/// `total` of a campaign never exceeds this, restocks included.
pub const MAX_TOTAL: u64 = 1_000_000_000_000;

/// What a campaign sells: anonymous units (`stock`) or unique codes (`codes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Stock,
    Codes,
}

/// Whether a campaign sells; `closed` is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Active,
    Paused,
    Closed,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Stock => "stock",
            Kind::Codes => "codes",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "stock" => Some(Kind::Stock),
            "codes" => Some(Kind::Codes),
            _ => None,
        }
    }
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Paused => "paused",
            Status::Closed => "closed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(Status::Active),
            "paused" => Some(Status::Paused),
            "closed" => Some(Status::Closed),
            _ => None,
        }
    }

    /// Whether an admin may move a campaign from `self` to `to`; `closed` is final.
    pub fn transition(self, to: Status) -> Result<(), Error> {
        if self == Status::Closed && to != Status::Closed {
            return Err(Error::Conflict(format!(
                "campaign is closed for good; it cannot become {}",
                to.as_str()
            )));
        }
        Ok(())
    }
}

/// What a campaign sells: anonymous units, or a pool of unique codes (one per unit).
#[derive(Debug, Clone, PartialEq)]
pub enum Supply {
    Stock(u64),
    Codes(Vec<String>),
}

/// The immutable part of a campaign.
#[derive(Debug, Clone, PartialEq)]
pub struct CampaignDef {
    pub id: String,
    pub kind: Kind,
    pub per_user_limit: u64,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    /// Seconds a won order waits for its confirm; `None`: orders are final at once.
    pub hold_seconds: Option<u32>,
    /// Claims need a ticket from this waiting room (`crate::room`).
    pub waiting_room: Option<WaitingRoom>,
}

impl CampaignDef {
    /// Whether a campaign of this definition can never sell again from `now` on in `status`:
    /// closed (for good), or past its `ends_at` (which never changes). Both engines decide
    /// these before they read a buyer's holding, so such a campaign answers every claim
    /// without them (a *dormant* campaign, README "How it works").
    pub fn stopped_for_good(&self, status: Status, now: DateTime<Utc>) -> bool {
        status == Status::Closed || self.ends_at.is_some_and(|e| now >= e)
    }
}

/// The body of `POST /v1/campaigns` as it arrives on the wire: exactly one of `stock` or
/// `codes`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "double11", "stock": 10, "per_user_limit": 1}))]
pub struct NewCampaignBody {
    /// 1–64 characters of `[A-Za-z0-9_-]`; a duplicate is 409.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$", min_length = 1, max_length = 64)]
    pub id: String,
    /// Units to sell (stock campaigns).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub stock: Option<u64>,
    /// Unique codes, one per unit (code campaigns): 1 … 10^6 unique printable strings of
    /// 1–128 bytes.
    #[serde(default, deserialize_with = "super::validate::bounded_codes")]
    #[schema(min_items = 1, max_items = 1_000_000)]
    pub codes: Option<Vec<String>>,
    /// Most units one user may hold (default 1).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub per_user_limit: Option<u64>,
    /// Start of the sale window (inclusive), by the server's clock.
    #[serde(default)]
    pub starts_at: Option<DateTime<Utc>>,
    /// End of the sale window (exclusive); later than `starts_at`.
    #[serde(default)]
    pub ends_at: Option<DateTime<Utc>>,
    /// Seconds a won order waits for its payment (see `docs/HOLDS.md`); none: orders are
    /// final (`active`) at once.
    #[serde(default)]
    pub hold_seconds: Option<u64>,
    /// A waiting room in front of the sale (docs/WAITING_ROOM.md): claims then need a ticket.
    #[serde(default)]
    pub waiting_room: Option<WaitingRoomBody>,
}

/// Longest payment window a campaign may give its orders (`hold_seconds`).
pub const MAX_HOLD_SECONDS: u64 = 86_400;

/// A validated campaign definition.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCampaign {
    pub id: String,
    pub supply: Supply,
    pub per_user_limit: u64,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub hold_seconds: Option<u32>,
    pub waiting_room: Option<WaitingRoom>,
}

impl TryFrom<NewCampaignBody> for NewCampaign {
    type Error = Error;

    fn try_from(body: NewCampaignBody) -> Result<Self, Error> {
        validate_campaign_id(&body.id)?;
        let supply = match (body.stock, body.codes) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid("give either stock or codes, not both"));
            }
            (None, None) => return Err(Error::invalid("one of stock or codes is required")),
            (Some(stock), None) => {
                if !(1..=MAX_STOCK).contains(&stock) {
                    return Err(Error::invalid(format!(
                        "stock must be between 1 and {MAX_STOCK}, got {stock}"
                    )));
                }
                Supply::Stock(stock)
            }
            (None, Some(codes)) => {
                validate::validate_codes(&codes)?;
                Supply::Codes(codes)
            }
        };
        let per_user_limit = body.per_user_limit.unwrap_or(1);
        if !(1..=MAX_PER_USER_LIMIT).contains(&per_user_limit) {
            return Err(Error::invalid(format!(
                "per_user_limit must be between 1 and {MAX_PER_USER_LIMIT}, got {per_user_limit}"
            )));
        }
        if let (Some(s), Some(e)) = (body.starts_at, body.ends_at) {
            if e <= s {
                return Err(Error::invalid("ends_at must be later than starts_at"));
            }
        }
        let hold_seconds = match body.hold_seconds {
            None => None,
            Some(h @ 1..=MAX_HOLD_SECONDS) => Some(h as u32),
            Some(h) => {
                return Err(Error::invalid(format!(
                    "hold_seconds must be between 1 and {MAX_HOLD_SECONDS}, got {h}"
                )))
            }
        };
        let waiting_room = body.waiting_room.map(WaitingRoom::try_from).transpose()?;
        Ok(NewCampaign {
            id: body.id,
            supply,
            per_user_limit,
            starts_at: body.starts_at,
            ends_at: body.ends_at,
            hold_seconds,
            waiting_room,
        })
    }
}

impl NewCampaign {
    pub fn kind(&self) -> Kind {
        match self.supply {
            Supply::Stock(_) => Kind::Stock,
            Supply::Codes(_) => Kind::Codes,
        }
    }

    pub fn total(&self) -> u64 {
        match &self.supply {
            Supply::Stock(n) => *n,
            Supply::Codes(c) => c.len() as u64,
        }
    }
}

/// The body of `POST /v1/campaigns/{id}/restock`: `units` for a stock campaign or `codes`
/// for a code campaign.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"units": 5}))]
pub struct RestockBody {
    /// Units to add (stock campaigns).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub units: Option<u64>,
    /// Codes to add (code campaigns); none the campaign already has (409).
    #[serde(default, deserialize_with = "super::validate::bounded_codes")]
    #[schema(min_items = 1, max_items = 1_000_000)]
    pub codes: Option<Vec<String>>,
}

/// A validated restock: more units for a stock campaign or more codes for a code campaign.
#[derive(Debug, Clone, PartialEq)]
pub enum Restock {
    Units(u64),
    Codes(Vec<String>),
}

impl TryFrom<RestockBody> for Restock {
    type Error = Error;

    fn try_from(body: RestockBody) -> Result<Self, Error> {
        match (body.units, body.codes) {
            (Some(_), Some(_)) => Err(Error::invalid("give either units or codes, not both")),
            (None, None) => Err(Error::invalid("one of units or codes is required")),
            (Some(units), None) => {
                if !(1..=MAX_STOCK).contains(&units) {
                    return Err(Error::invalid(format!(
                        "units must be between 1 and {MAX_STOCK}, got {units}"
                    )));
                }
                Ok(Restock::Units(units))
            }
            (None, Some(codes)) => {
                validate::validate_codes(&codes)?;
                Ok(Restock::Codes(codes))
            }
        }
    }
}

impl Restock {
    pub fn kind(&self) -> Kind {
        match self {
            Restock::Units(_) => Kind::Stock,
            Restock::Codes(_) => Kind::Codes,
        }
    }

    pub fn amount(&self) -> u64 {
        match self {
            Restock::Units(n) => *n,
            Restock::Codes(c) => c.len() as u64,
        }
    }

    /// Checks that this restock fits a campaign of `kind` currently holding `total` units.
    pub fn check_against(&self, kind: Kind, total: u64) -> Result<(), Error> {
        if self.kind() != kind {
            return Err(Error::invalid(format!(
                "this is a {} campaign; restock it with {}",
                kind.as_str(),
                match kind {
                    Kind::Stock => "{\"units\": n}",
                    Kind::Codes => "{\"codes\": [...]}",
                }
            )));
        }
        if total.saturating_add(self.amount()) > MAX_TOTAL {
            return Err(Error::invalid(format!(
                "total would become {}, above the maximum {MAX_TOTAL}",
                total.saturating_add(self.amount())
            )));
        }
        Ok(())
    }
}

/// `GET /v1/campaigns/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CampaignView {
    pub id: String,
    pub kind: Kind,
    /// Units ever offered (initial supply plus restocks); at most 10^12.
    pub total: u64,
    /// Units not held by a live order.
    pub remaining: u64,
    pub per_user_limit: u64,
    pub status: Status,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    /// Campaigns with holds only: `hold_seconds` and `pending`.
    #[serde(flatten, skip_serializing_if = "Option::is_none", default)]
    pub holds: Option<HoldsView>,
    /// Campaigns with a waiting room only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub waiting_room: Option<WaitingRoom>,
}

/// The hold fields of a campaign view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HoldsView {
    /// The payment window of the campaign's orders.
    pub hold_seconds: u32,
    /// Units in `pending` orders (not in `remaining`).
    pub pending: u64,
}
