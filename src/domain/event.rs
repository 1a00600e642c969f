//! The event feed's wire format: what `GET /v1/events` answers and what it takes.
//!
//! An order is the start of work in the shop's own systems (payment, fulfilment, the buyer's
//! message), and a confirm, an expiry or a cancel changes it in place, where paging orders
//! never sees it again. The feed lists every transition once, in the ledger's order, so a
//! consumer that follows its cursor sees each order's whole life and misses nothing. Each event
//! carries the order (or campaign) as it stood right after the transition.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{CampaignView, Error, Order};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum EventType {
    #[serde(rename = "order.won")]
    OrderWon,
    #[serde(rename = "order.confirmed")]
    OrderConfirmed,
    #[serde(rename = "order.expired")]
    OrderExpired,
    #[serde(rename = "order.cancelled")]
    OrderCancelled,
    #[serde(rename = "campaign.created")]
    CampaignCreated,
    #[serde(rename = "campaign.restocked")]
    CampaignRestocked,
    #[serde(rename = "campaign.paused")]
    CampaignPaused,
    #[serde(rename = "campaign.resumed")]
    CampaignResumed,
    #[serde(rename = "campaign.closed")]
    CampaignClosed,
}

impl EventType {
    pub const ALL: [EventType; 9] = [
        EventType::OrderWon,
        EventType::OrderConfirmed,
        EventType::OrderExpired,
        EventType::OrderCancelled,
        EventType::CampaignCreated,
        EventType::CampaignRestocked,
        EventType::CampaignPaused,
        EventType::CampaignResumed,
        EventType::CampaignClosed,
    ];

    /// The name on the wire and in the ledger's `feed.type` column.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::OrderWon => "order.won",
            EventType::OrderConfirmed => "order.confirmed",
            EventType::OrderExpired => "order.expired",
            EventType::OrderCancelled => "order.cancelled",
            EventType::CampaignCreated => "campaign.created",
            EventType::CampaignRestocked => "campaign.restocked",
            EventType::CampaignPaused => "campaign.paused",
            EventType::CampaignResumed => "campaign.resumed",
            EventType::CampaignClosed => "campaign.closed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// An order's transition (else a campaign's change).
    pub fn is_order(self) -> bool {
        self.as_str().starts_with("order.")
    }
}

/// One event of the feed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    /// Stable and unique: the same event always has this id (a webhook's `webhook-id`).
    pub id: String,
    /// This event's place in the feed: pass it as `after` to read what follows it.
    pub cursor: String,
    #[serde(rename = "type")]
    pub kind: EventType,
    /// When the transition happened (the order's own time: `created_at`, `resolved_at` or
    /// `cancelled_at`; for a campaign change, when the ledger wrote it).
    pub at: DateTime<Utc>,
    pub campaign_id: String,
    /// `order.*` events: the order as `GET /v1/orders/{id}` showed it right after.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub order: Option<Order>,
    /// `campaign.*` events: the campaign as the ledger held it right after the change.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub campaign: Option<CampaignView>,
}

/// A page of the feed, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Pass as `after` for what follows. Never null: the feed goes on; a page with fewer events
    /// than `limit` (none, after a `wait_ms` that saw nothing) is simply the newest so far, and
    /// its cursor has read past every event that did not match the filters.
    pub next_cursor: String,
}

/// Query of `GET /v1/events` (serialised by the client that reads the feed).
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// A `cursor` or `next_cursor` from this feed; omitted: from the oldest event kept.
    #[param(pattern = "^(0|[1-9][0-9]{0,18})$")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Events per page (default 100).
    #[param(minimum = 1, maximum = 1000)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Only this campaign's events.
    #[param(min_length = 1, max_length = 64)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub campaign: Option<String>,
    /// Only events of this type (`order.won`, `order.confirmed`, …).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    #[param(rename = "type")]
    pub kind: Option<String>,
    /// When nothing matches yet, wait up to this long for an event (long poll), 0–30000.
    #[param(minimum = 0, maximum = 30000)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// A validated [`EventQuery`].
#[derive(Debug, Clone, PartialEq)]
pub struct EventFilter {
    /// `None`: from the oldest event kept.
    pub after: Option<u64>,
    pub limit: u32,
    pub campaign: Option<String>,
    pub kind: Option<EventType>,
    pub wait_ms: u64,
}

impl EventQuery {
    pub const DEFAULT_LIMIT: u32 = 100;
    pub const MAX_LIMIT: u32 = 1000;
    pub const MAX_WAIT_MS: u64 = 30_000;

    pub fn resolve(&self) -> Result<EventFilter, Error> {
        let after = match self.after.as_deref() {
            None => None,
            Some(c) => Some(super::order::canonical_number(c).ok_or_else(|| {
                Error::invalid(format!("after {c:?} is not a cursor of this feed"))
            })?),
        };
        let limit = self.limit.unwrap_or(Self::DEFAULT_LIMIT);
        if !(1..=Self::MAX_LIMIT).contains(&limit) {
            return Err(Error::invalid(format!(
                "limit must be between 1 and {}, got {limit}",
                Self::MAX_LIMIT
            )));
        }
        if let Some(c) = &self.campaign {
            super::validate_campaign_id(c)?;
        }
        let kind = match self.kind.as_deref() {
            None => None,
            Some(t) => Some(EventType::parse(t).ok_or_else(|| {
                let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                Error::invalid(format!(
                    "type {t:?} is not an event type; one of {}",
                    known.join(", ")
                ))
            })?),
        };
        let wait_ms = self.wait_ms.unwrap_or(0);
        if wait_ms > Self::MAX_WAIT_MS {
            return Err(Error::invalid(format!(
                "wait_ms must be between 0 and {}, got {wait_ms}",
                Self::MAX_WAIT_MS
            )));
        }
        Ok(EventFilter {
            after,
            limit,
            campaign: self.campaign.clone(),
            kind,
            wait_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_its_name() {
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.as_str()));
        }
        assert_eq!(EventType::parse("order.shipped"), None);
    }

    #[test]
    fn queries_are_checked() {
        let q = |after: Option<&str>, limit, kind: Option<&str>, wait| EventQuery {
            after: after.map(str::to_owned),
            limit,
            campaign: None,
            kind: kind.map(str::to_owned),
            wait_ms: wait,
        };
        let ok = q(Some("42"), Some(10), Some("order.won"), Some(500))
            .resolve()
            .unwrap();
        assert_eq!(ok.after, Some(42));
        assert_eq!(ok.kind, Some(EventType::OrderWon));
        assert_eq!(q(None, None, None, None).resolve().unwrap().after, None);
        for bad in [
            q(Some("01"), None, None, None),
            q(Some("-1"), None, None, None),
            q(Some(""), None, None, None),
            q(Some("99999999999999999999"), None, None, None),
            q(None, Some(0), None, None),
            q(None, Some(1001), None, None),
            q(None, None, Some("order"), None),
            q(None, None, None, Some(30_001)),
        ] {
            assert!(matches!(bad.resolve(), Err(Error::Invalid(_))), "{bad:?}");
        }
    }
}
