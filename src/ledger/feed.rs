//! The event feed as both ledgers keep it (migrations `sqlite/0009_event_feed.sql` and
//! `postgres/0010_event_feed.sql`): triggers write one row per order transition and campaign
//! change in the transaction that makes it, and a position numbers each row in the order
//! readers may follow without skipping one.
//!
//! An order event keeps only the order's `(campaign_id, seq)`: each column an order shows after
//! a transition is written once and never changed, so the event is rendered here from the
//! order's row and its type ([`render`]). A campaign event keeps the campaign row as it stood.

use anyhow::{anyhow, Context};
use serde::Deserialize;

use super::rows::{opt_time, time, OrderRow};
use crate::domain::{
    CampaignView, Event, EventType, HoldsView, Kind, Order, OrderState, Status, WaitingRoom,
};

/// Where the feed stands: every position up to `numbered` is readable, and every position up
/// to `pruned_through` was removed by retention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeedHead {
    pub numbered: u64,
    pub pruned_through: u64,
}

/// A read of the feed: the events with `after < position ≤ upto`, oldest first.
#[derive(Debug, Clone)]
pub struct FeedRead<'a> {
    pub after: u64,
    pub upto: u64,
    pub limit: u32,
    pub campaign: Option<&'a str>,
    pub kind: Option<EventType>,
}

impl FeedRead<'_> {
    /// The SQL conditions of the filters, after the three parameters every read binds (after,
    /// upto, limit): the campaign's as parameter 4, the type's as the next, each written
    /// `{mark}N` on column `{table}.…`. One statement per filter, so each is planned for its
    /// index (a campaign's events by `feed_by_campaign`), not one plan for all; the caller
    /// binds the campaign, then the type, when present.
    pub fn conditions(&self, mark: char, table: &str) -> String {
        let mut sql = String::new();
        let mut n = 4;
        if self.campaign.is_some() {
            sql.push_str(&format!(" AND {table}campaign_id = {mark}{n}"));
            n += 1;
        }
        if self.kind.is_some() {
            sql.push_str(&format!(" AND {table}type = {mark}{n}"));
        }
        sql
    }
}

/// One feed row with the columns of its order, as both ledgers select it.
#[derive(Debug, sqlx::FromRow)]
pub struct FeedRow {
    pub pos: i64,
    pub id: i64,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub at: i64,
    pub campaign_id: String,
    pub body: Option<String>,
    pub order_id: Option<String>,
    pub user_id: Option<String>,
    pub qty: Option<i64>,
    pub codes: Option<String>,
    pub created_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub pay_by: Option<i64>,
    pub resolved_at: Option<i64>,
}

/// The columns both ledgers select, after `SELECT` (`f` is the feed, `o` the order); each adds
/// its event id as `id`.
pub const FEED_COLUMNS: &str = "f.pos, f.type, f.at, f.campaign_id, f.body, \
     o.order_id, o.user_id, o.qty, o.codes, o.created_at, o.cancelled_at, o.pay_by, \
     o.resolved_at";

/// A campaign event's body: the campaign row after the change.
#[derive(Debug, Deserialize)]
struct CampaignBody {
    id: String,
    kind: String,
    total: i64,
    live: i64,
    pending: i64,
    per_user_limit: i64,
    status: String,
    starts_at: Option<i64>,
    ends_at: Option<i64>,
    hold_seconds: Option<i64>,
    #[serde(default)]
    waiting_room: Option<WaitingRoom>,
}

/// The event a feed row stands for.
pub fn render(r: FeedRow) -> anyhow::Result<Event> {
    let kind =
        EventType::parse(&r.kind).ok_or_else(|| anyhow!("unknown event type {:?}", r.kind))?;
    let (order, campaign) = if kind.is_order() {
        (Some(order_after(kind, &r)?), None)
    } else {
        let body = r
            .body
            .as_deref()
            .context("a campaign event without its campaign")?;
        let b: CampaignBody = serde_json::from_str(body).context("a campaign event's body")?;
        (None, Some(campaign_view(b)?))
    };
    Ok(Event {
        id: format!("evt_{}", r.id),
        cursor: r.pos.to_string(),
        kind,
        at: time(r.at)?,
        campaign_id: r.campaign_id,
        order,
        campaign,
    })
}

/// The order as `GET /v1/orders/{id}` showed it right after the transition `kind`: its row
/// with the state the event names and only the timestamps that existed by then.
fn order_after(kind: EventType, r: &FeedRow) -> anyhow::Result<Order> {
    let (state, cancelled_at, resolved_at) = match kind {
        EventType::OrderWon if r.pay_by.is_some() => (OrderState::Pending, None, None),
        EventType::OrderWon => (OrderState::Active, None, None),
        EventType::OrderConfirmed => (OrderState::Confirmed, None, r.resolved_at),
        EventType::OrderExpired => (OrderState::Expired, None, r.resolved_at),
        _ => (OrderState::Cancelled, r.cancelled_at, r.resolved_at),
    };
    Order::try_from(OrderRow {
        order_id: r
            .order_id
            .clone()
            .context("an order event whose order is not in the ledger")?,
        campaign_id: r.campaign_id.clone(),
        user_id: r.user_id.clone().unwrap_or_default(),
        qty: r.qty.unwrap_or_default(),
        codes: r.codes.clone(),
        state: state.as_str().to_owned(),
        created_at: r.created_at.unwrap_or_default(),
        cancelled_at,
        pay_by: r.pay_by,
        resolved_at,
    })
}

fn campaign_view(b: CampaignBody) -> anyhow::Result<CampaignView> {
    Ok(CampaignView {
        kind: Kind::parse(&b.kind).ok_or_else(|| anyhow!("unknown campaign kind {:?}", b.kind))?,
        status: Status::parse(&b.status)
            .ok_or_else(|| anyhow!("unknown campaign status {:?}", b.status))?,
        total: b.total as u64,
        remaining: b.total.saturating_sub(b.live).max(0) as u64,
        per_user_limit: b.per_user_limit as u64,
        starts_at: opt_time(b.starts_at)?,
        ends_at: opt_time(b.ends_at)?,
        holds: b.hold_seconds.map(|h| HoldsView {
            hold_seconds: h as u32,
            pending: b.pending as u64,
        }),
        waiting_room: b.waiting_room,
        id: b.id,
    })
}
