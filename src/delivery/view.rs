//! What `/v1/webhooks` shows and takes: an endpoint with its delivery state (how far it got,
//! its backlog, its failures and dead letters, which instance delivers it), never its secret
//! after creation.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::Error;
use crate::ledger::sinks::{Parked, SinkRow};

/// `POST /v1/webhooks`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    /// Where events are POSTed: `http://` or `https://`.
    pub url: String,
    /// `whsec_` + base64 of 24–64 bytes; generated when omitted.
    #[serde(default)]
    pub secret: Option<String>,
    /// Free text for operators (at most 500 bytes).
    #[serde(default)]
    pub description: Option<String>,
}

impl NewEndpoint {
    pub fn check(&self) -> Result<(), Error> {
        super::webhook::check_url(&self.url).map_err(|e| Error::invalid(format!("url: {e}")))?;
        if let Some(s) = &self.secret {
            super::sign::Key::parse(s).map_err(|e| Error::invalid(format!("secret: {e}")))?;
        }
        if self.description.as_ref().is_some_and(|d| d.len() > 500) {
            return Err(Error::invalid("description: at most 500 bytes"));
        }
        Ok(())
    }
}

/// A webhook endpoint and how its delivery stands.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Endpoint {
    pub id: String,
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub description: Option<String>,
    /// `flag` (`--webhook`, delivered by the instances started with it) or `api`.
    pub origin: String,
    /// `enabled` or `disabled` (by `POST …/disable`, or after the endpoint answered 410).
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub disabled_reason: Option<String>,
    /// The feed position every event up to which was delivered or set aside.
    pub cursor: String,
    /// Events of the feed after `cursor`.
    pub backlog: u64,
    pub delivered: u64,
    /// Failed attempts in all (each retried).
    pub failed_attempts: u64,
    /// Since when the endpoint keeps failing (none once an event got through again).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub failing_since: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub last_delivered_at: Option<DateTime<Utc>>,
    /// Events given up on after `--webhook-max-age` of retries, and the later events of their
    /// orders (`GET …/dead-letters`).
    pub dead_letters: u64,
    /// Events parked for a retry: one an endpoint refused while it took others, and the later
    /// events of its order waiting behind it.
    pub retrying: u64,
    /// Events retention removed before they were delivered.
    pub lost: u64,
    /// The instance delivering it (its lease), if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub delivered_by: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Only in the answer of `POST /v1/webhooks`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub secret: Option<String>,
}

fn time(micros: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(micros).unwrap_or_default()
}

impl Endpoint {
    pub fn of(row: SinkRow, head: u64, now: i64) -> Endpoint {
        let held = row.lease_until.is_some_and(|u| u >= now);
        Endpoint {
            backlog: head.saturating_sub(row.cursor as u64),
            cursor: row.cursor.to_string(),
            state: if row.enabled == 1 {
                "enabled"
            } else {
                "disabled"
            }
            .to_owned(),
            delivered: row.delivered as u64,
            failed_attempts: row.failures as u64,
            failing_since: row.failing_since.map(time),
            last_delivered_at: row.last_delivered_at.map(time),
            dead_letters: row.dead_letters as u64,
            retrying: row.retrying as u64,
            lost: row.lost as u64,
            delivered_by: row.lease_owner.filter(|_| held),
            created_at: time(row.created_at),
            secret: None,
            id: row.id,
            url: row.target,
            description: row.description,
            origin: row.origin,
            disabled_reason: row.disabled_reason,
            last_error: row.last_error,
        }
    }
}

/// `GET /v1/webhooks`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EndpointList {
    pub endpoints: Vec<Endpoint>,
}

/// An event an endpoint never took.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterView {
    pub event_id: String,
    pub cursor: String,
    /// Attempts made (0 for an event that died behind an earlier one of its order).
    pub attempts: u64,
    pub last_error: String,
    /// When its last attempt was made or due.
    pub dead_at: DateTime<Utc>,
    /// The event exactly as it was sent.
    #[schema(value_type = Object)]
    pub event: serde_json::Value,
}

impl From<Parked> for DeadLetterView {
    fn from(d: Parked) -> Self {
        DeadLetterView {
            event: serde_json::from_str(&d.body).unwrap_or(serde_json::Value::String(d.body)),
            event_id: d.event_id,
            cursor: d.pos.to_string(),
            attempts: d.attempts as u64,
            last_error: d.last_error,
            dead_at: time(d.next_attempt_at),
        }
    }
}

/// `GET /v1/webhooks/{id}/dead-letters`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterList {
    pub dead_letters: Vec<DeadLetterView>,
}

/// `POST /v1/webhooks/{id}/replay`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Replaying {
    /// Dead letters made retrying again (each order's in order, for up to
    /// `--webhook-max-age`).
    pub replaying: u64,
}
