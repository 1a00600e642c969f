//! Orders: what a `won` claim leaves in the ledger.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Error;

/// `active` until cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderState {
    /// Won in a campaign without holds: final at once.
    Active,
    /// Won in a campaign with holds, waiting for its confirm until `pay_by`.
    Pending,
    /// A pending order confirmed (paid) before `pay_by`.
    Confirmed,
    /// A pending order whose `pay_by` passed unconfirmed: its units went back.
    Expired,
    Cancelled,
}

impl OrderState {
    pub fn as_str(self) -> &'static str {
        match self {
            OrderState::Active => "active",
            OrderState::Pending => "pending",
            OrderState::Confirmed => "confirmed",
            OrderState::Expired => "expired",
            OrderState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(OrderState::Active),
            "pending" => Some(OrderState::Pending),
            "confirmed" => Some(OrderState::Confirmed),
            "expired" => Some(OrderState::Expired),
            "cancelled" => Some(OrderState::Cancelled),
            _ => None,
        }
    }

    /// Whether the order holds its units (and codes, and the user's allowance).
    pub fn is_live(self) -> bool {
        matches!(
            self,
            OrderState::Active | OrderState::Pending | OrderState::Confirmed
        )
    }
}

/// `GET /v1/orders/{order_id}`. `codes` is present for code campaigns only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Order {
    /// `<campaign id>-<n>`, n counting from 1 per campaign.
    pub order_id: String,
    pub campaign_id: String,
    pub user_id: String,
    pub qty: u64,
    /// Code campaigns only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub codes: Option<Vec<String>>,
    pub state: OrderState,
    pub created_at: DateTime<Utc>,
    /// Cancelled orders only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schema(nullable = false)]
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Orders of campaigns with holds: the deadline of the confirm.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pay_by: Option<DateTime<Utc>>,
    /// When a pending order became `confirmed` or `expired`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolved_at: Option<DateTime<Utc>>,
}

impl Order {
    /// The per-campaign sequence number of this order (the part after the last `-`).
    pub fn seq(&self) -> u64 {
        parse_order_id(&self.order_id).map(|(_, s)| s).unwrap_or(0)
    }
}

/// Order ids are `<campaign_id>-<seq>`; campaign ids may themselves contain `-`.
///
/// Parsed canonically: `seq` is the decimal form the engine issues (no sign, no leading zero,
/// at least 1, at most `i64::MAX`, the ledger's column type). Any other spelling names no order
/// (404 at once), so `x-01` and `x-1` can never be two names of one order and a lookup never
/// has to wait for an order number the gate could not have issued.
pub fn parse_order_id(order_id: &str) -> Result<(&str, u64), Error> {
    let bad = || Error::order_not_found(order_id);
    let (campaign, seq) = order_id.rsplit_once('-').ok_or_else(bad)?;
    let seq = canonical_number(seq).filter(|n| *n >= 1).ok_or_else(bad)?;
    if super::validate_campaign_id(campaign).is_err() {
        return Err(bad());
    }
    Ok((campaign, seq))
}

/// A non-negative decimal in canonical form (`0`, or digits without a leading zero) that fits
/// the ledger's signed 64-bit columns.
pub(super) fn canonical_number(s: &str) -> Option<u64> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse::<u64>().ok().filter(|n| *n <= i64::MAX as u64)
}

/// Query of `GET /v1/campaigns/{id}/orders`: oldest first, `cursor` is the `next_cursor` of the
/// previous page.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrderQuery {
    /// Only this user's orders.
    #[param(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"
    )]
    pub user_id: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(pattern = "^(0|[1-9][0-9]{0,18})?$")]
    pub cursor: Option<String>,
    /// Orders per page (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

impl OrderQuery {
    pub const DEFAULT_LIMIT: u32 = 100;
    pub const MAX_LIMIT: u32 = 1000;

    /// Validated (after-seq, limit).
    pub fn resolve(&self) -> Result<(u64, u32), Error> {
        let after = match self.cursor.as_deref() {
            None | Some("") => 0,
            Some(c) => canonical_number(c).ok_or_else(|| {
                Error::invalid(format!("cursor {c:?} is not one this server issued"))
            })?,
        };
        let limit = self.limit.unwrap_or(Self::DEFAULT_LIMIT);
        if !(1..=Self::MAX_LIMIT).contains(&limit) {
            return Err(Error::invalid(format!(
                "limit must be between 1 and {}, got {limit}",
                Self::MAX_LIMIT
            )));
        }
        if let Some(u) = &self.user_id {
            super::validate_user_id(u)?;
        }
        Ok((after, limit))
    }
}

/// A page of orders, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct OrderPage {
    pub orders: Vec<Order>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

impl OrderPage {
    /// Builds a page from up to `limit + 1` orders fetched in seq order: the extra row, if
    /// present, only tells that another page exists.
    pub fn from_rows(mut orders: Vec<Order>, limit: u32) -> Self {
        let more = orders.len() > limit as usize;
        orders.truncate(limit as usize);
        let next_cursor = if more {
            orders.last().map(|o| o.seq().to_string())
        } else {
            None
        };
        Self {
            orders,
            next_cursor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ids_parse_canonically() {
        assert_eq!(parse_order_id("a-b-7").unwrap(), ("a-b", 7));
        assert_eq!(
            parse_order_id("x-9223372036854775807").unwrap().1,
            i64::MAX as u64
        );
        for bad in [
            "zz-0",
            "zz-01",
            "zz-+1",
            "zz-",
            "zz",
            "-1",
            "zz-1 ",
            "zz- 1",
            "zz-1e3",
            "zz-0x1",
            "zz-9223372036854775808",
            "zz-18446744073709551616",
            "zz-١",
        ] {
            assert!(parse_order_id(bad).is_err(), "{bad:?} must not parse");
        }
    }

    #[test]
    fn cursors_out_of_range_are_refused() {
        let q = |c: &str| OrderQuery {
            cursor: Some(c.into()),
            ..OrderQuery::default()
        };
        assert_eq!(q("0").resolve().unwrap().0, 0);
        assert_eq!(q("42").resolve().unwrap().0, 42);
        for bad in [
            "-1",
            "+1",
            "01",
            "9223372036854775808",
            "18446744073709551615",
            "x",
        ] {
            assert!(q(bad).resolve().is_err(), "cursor {bad:?} must be refused");
        }
    }
}
