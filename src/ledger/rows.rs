//! Conversions between domain values and the column encodings the ledgers store.

use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};

use crate::domain::{ClaimAnswer, Order, OrderState};

pub fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

pub fn time(us: i64) -> anyhow::Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| anyhow!("timestamp {us} out of range"))
}

pub fn opt_time(us: Option<i64>) -> anyhow::Result<Option<DateTime<Utc>>> {
    us.map(time).transpose()
}

pub fn codes_json(codes: &Option<Vec<String>>) -> Option<String> {
    codes
        .as_ref()
        .map(|c| serde_json::to_string(c).expect("strings serialize"))
}

pub fn parse_codes(json: Option<String>) -> anyhow::Result<Option<Vec<String>>> {
    json.map(|j| serde_json::from_str(&j).context("codes column is not a JSON array"))
        .transpose()
}

pub fn answer_json(answer: &ClaimAnswer) -> String {
    serde_json::to_string(answer).expect("answers serialize")
}

pub fn parse_answer(json: &str) -> anyhow::Result<ClaimAnswer> {
    serde_json::from_str(json).context("idempotency answer is not valid JSON")
}

/// The raw columns of an `orders` row, as both ledgers select them.
#[derive(sqlx::FromRow)]
pub struct OrderRow {
    pub order_id: String,
    pub campaign_id: String,
    pub user_id: String,
    pub qty: i64,
    pub codes: Option<String>,
    pub state: String,
    pub created_at: i64,
    pub cancelled_at: Option<i64>,
    /// Absent from ledgers without holds (the scale-out ledger selects no such column).
    #[sqlx(default)]
    pub pay_by: Option<i64>,
    #[sqlx(default)]
    pub resolved_at: Option<i64>,
}

impl TryFrom<OrderRow> for Order {
    type Error = anyhow::Error;

    fn try_from(r: OrderRow) -> anyhow::Result<Order> {
        Ok(Order {
            state: OrderState::parse(&r.state)
                .ok_or_else(|| anyhow!("unknown order state {:?}", r.state))?,
            codes: parse_codes(r.codes)?,
            created_at: time(r.created_at)?,
            cancelled_at: opt_time(r.cancelled_at)?,
            pay_by: opt_time(r.pay_by)?,
            resolved_at: opt_time(r.resolved_at)?,
            order_id: r.order_id,
            campaign_id: r.campaign_id,
            user_id: r.user_id,
            qty: r.qty as u64,
        })
    }
}
