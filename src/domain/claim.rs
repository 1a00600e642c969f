//! A claim request and its answer.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::validate::{validate_idempotency_key, validate_qty, validate_user_id};
use super::Error;

/// The body of `POST /v1/campaigns/{id}/claims`, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"user_id": "u101", "qty": 1}))]
pub struct ClaimRequest {
    /// 1–128 bytes, printable, no control characters.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"
    )]
    pub user_id: String,
    /// Units wanted, all or nothing (default 1); above the per-user limit it is `over_limit`.
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 1_000_000, default = 1)]
    pub qty: u64,
}

fn one() -> u64 {
    1
}

impl ClaimRequest {
    pub fn validate(&self) -> Result<(), Error> {
        validate_user_id(&self.user_id)?;
        validate_qty(self.qty)
    }
}

/// The `Idempotency-Key` header of a claim, validated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn new(key: &str) -> Result<Self, Error> {
        validate_idempotency_key(key)?;
        Ok(Self(key.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Outcome of a processed claim, in the order the engine checks them: `paused`/`closed`
/// (campaign not selling), `not_started`/`ended` (outside the sale window),
/// `already_claimed` (the user holds `per_user_limit` units), `over_limit` (held + qty would
/// exceed it), `sold_out` (fewer than qty units remain), `won`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Paused,
    Closed,
    NotStarted,
    Ended,
    AlreadyClaimed,
    OverLimit,
    SoldOut,
    Won,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Paused,
        Outcome::Closed,
        Outcome::NotStarted,
        Outcome::Ended,
        Outcome::AlreadyClaimed,
        Outcome::OverLimit,
        Outcome::SoldOut,
        Outcome::Won,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Paused => "paused",
            Outcome::Closed => "closed",
            Outcome::NotStarted => "not_started",
            Outcome::Ended => "ended",
            Outcome::AlreadyClaimed => "already_claimed",
            Outcome::OverLimit => "over_limit",
            Outcome::SoldOut => "sold_out",
            Outcome::Won => "won",
        }
    }
}

/// The 200 answer to a processed claim.
///
/// `order_id`, `qty` and (code campaigns) `codes` accompany `won`; `remaining` accompanies
/// `sold_out`; `held` (units the user already holds) accompanies `already_claimed`/`over_limit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"outcome": "won", "order_id": "double11-7", "qty": 1}))]
pub struct ClaimAnswer {
    pub outcome: Outcome,
    /// `won`: the order's id, `<campaign id>-<n>`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub order_id: Option<String>,
    /// `won`: the units won.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub qty: Option<u64>,
    /// `won` in a code campaign: the codes handed out.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub codes: Option<Vec<String>>,
    /// `sold_out`: units left (fewer than asked).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub remaining: Option<u64>,
    /// `already_claimed` / `over_limit`: units the user already holds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub held: Option<u64>,
    /// `won` in a campaign with holds: `pending`, to be confirmed by `pay_by`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub state: Option<super::OrderState>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pay_by: Option<DateTime<Utc>>,
}

impl ClaimAnswer {
    /// An answer that carries only its outcome.
    pub fn bare(outcome: Outcome) -> Self {
        Self {
            outcome,
            order_id: None,
            qty: None,
            codes: None,
            remaining: None,
            held: None,
            state: None,
            pay_by: None,
        }
    }
}
