//! Stream entries of the order pipeline: what the claim and resolution scripts append, parsed
//! back into the ledger writes they stand for.
//!
//! Three kinds share a campaign's stream (docs/HOLDS.md, "Scale-out"):
//! - a **batch of new orders** from `claims.lua`: `at`, `pay_by` for a campaign with holds, and
//!   `orders`, one line per order (`order_id`, `user`, `qty`, then its codes, tab-separated).
//!   One entry per script call rather than per order, because Redis pays for a stream entry
//!   three times (XADD, the XREADGROUP reply, the acknowledgement) whatever it holds;
//!   [`Entry::expand`] turns it back into one entry per order, all under the batch's stream id;
//! - a **new order** (`order_id`, `user`, `qty`, `at`, optional `codes`, and `pay_by` for a
//!   campaign with holds, which makes the order `pending`), from `claim.lua`;
//! - a **transition** of a pending order, decided in Redis: `kind` (`confirmed`, `expired` or
//!   `cancelled`), `resolved_at`, and the whole order again. It carries the whole order so that
//!   it can be applied even before its new-order entry (reclaimed entries arrive out of order).
//!
//! An entry without `kind` is a new order, so entries written before holds existed still parse.

use std::collections::HashMap;

use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};
use redis::Value;

use crate::domain::{Order, OrderState};
use crate::ledger::{stream_pos, Origin, PipelineWrite, Transition};

mod batch;

use batch::{Line, ORDERS};

/// The field naming the replication lineage of the Redis Cluster node that wrote an entry.
const LINEAGE: &str = "lineage";

/// One entry read from a campaign's order stream, or one order of a batch entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub campaign_id: String,
    pub stream_id: String,
    /// The stream entry's fields (none for an order expanded from a batch entry).
    pub fields: HashMap<String, Value>,
    /// An order expanded from a batch entry: its line and the batch's shared fields. Kept as
    /// the line, not as a map of fields per order: building and reading those maps was the
    /// largest cost of moving a won order into the ledger.
    line: Option<Line>,
    /// On a Redis Cluster: the lineage of the node that wrote the entry (its `lineage` field)
    /// and the entry's stream id (`ledger/postgres/lineage.rs`).
    origin: Option<Origin>,
}

fn micros(name: &str, text: &str) -> anyhow::Result<DateTime<Utc>> {
    let us: i64 = text
        .parse()
        .with_context(|| format!("{name} is not a number"))?;
    DateTime::from_timestamp_micros(us).ok_or_else(|| anyhow!("{name} {us} is out of range"))
}

impl Entry {
    /// The entry of stream id `stream_id` in campaign `campaign_id`'s stream.
    pub fn new(campaign_id: String, stream_id: String, fields: HashMap<String, Value>) -> Self {
        let origin = fields.get(LINEAGE).and_then(|v| {
            Some(Origin {
                lineage: redis::from_redis_value_ref(v).ok()?,
                pos: stream_pos(&stream_id)?,
            })
        });
        Self {
            campaign_id,
            stream_id,
            fields,
            line: None,
            origin,
        }
    }

    /// Where the entry was read, on a Redis Cluster.
    pub fn origin(&self) -> Option<Origin> {
        self.origin.clone()
    }

    /// The stream entry this one is, or came from: (campaign, stream id).
    pub fn key(&self) -> (&str, &str) {
        (&self.campaign_id, &self.stream_id)
    }

    fn text(&self, name: &str) -> anyhow::Result<String> {
        let v = self
            .fields
            .get(name)
            .ok_or_else(|| anyhow!("field {name} is missing"))?;
        redis::from_redis_value_ref(v).with_context(|| format!("field {name} is not text"))
    }

    fn time(&self, name: &str) -> anyhow::Result<DateTime<Utc>> {
        micros(name, &self.text(name)?)
    }

    /// The order this entry carries, as it was won: `pending` with its `pay_by` in a campaign
    /// with holds, `active` otherwise. An entry that does not parse is poison.
    pub fn order(&self) -> anyhow::Result<Order> {
        if let Some(line) = &self.line {
            let (order_id, user, qty, codes) = line.parts()?;
            let codes: Vec<String> = codes.map(str::to_owned).collect();
            let codes = (!codes.is_empty()).then_some(codes);
            return self.build(
                order_id.to_owned(),
                user.to_owned(),
                qty,
                codes,
                line.at,
                line.pay_by,
            );
        }
        let codes = match self.fields.contains_key("codes") {
            false => None,
            true => Some(self.text("codes")?.split('\n').map(str::to_owned).collect()),
        };
        let pay_by = match self.fields.contains_key("pay_by") {
            false => None,
            true => Some(self.time("pay_by")?),
        };
        let qty = self.text("qty")?;
        self.build(
            self.text("order_id")?,
            self.text("user")?,
            &qty,
            codes,
            self.time("at")?,
            pay_by,
        )
    }

    /// An order of this entry's campaign from its parts, checked.
    fn build(
        &self,
        order_id: String,
        user_id: String,
        qty: &str,
        codes: Option<Vec<String>>,
        created_at: DateTime<Utc>,
        pay_by: Option<DateTime<Utc>>,
    ) -> anyhow::Result<Order> {
        let (campaign, _) = crate::domain::parse_order_id(&order_id)
            .map_err(|_| anyhow!("order id {order_id:?} is malformed"))?;
        anyhow::ensure!(
            campaign == self.campaign_id,
            "order {order_id} is in the stream of campaign {}",
            self.campaign_id
        );
        let qty: u64 = qty.parse().context("qty is not a number")?;
        anyhow::ensure!(qty >= 1, "qty is 0");
        Ok(Order {
            order_id,
            campaign_id: self.campaign_id.clone(),
            user_id,
            qty,
            codes,
            state: match pay_by {
                Some(_) => OrderState::Pending,
                None => OrderState::Active,
            },
            created_at,
            cancelled_at: None,
            pay_by,
            resolved_at: None,
        })
    }

    /// What this entry asks of the ledger: a new order, or a transition of a pending one.
    pub fn write(&self) -> anyhow::Result<PipelineWrite> {
        if self.line.is_some() {
            return Ok(PipelineWrite::Order(self.order()?));
        }
        if self.fields.contains_key(ORDERS) {
            let why = self.unpack().err();
            return Err(why.unwrap_or_else(|| anyhow!("a batch entry not expanded")))
                .context("a batch of orders that does not unpack");
        }
        if !self.fields.contains_key("kind") {
            return Ok(PipelineWrite::Order(self.order()?));
        }
        let kind = self.text("kind")?;
        let to = match kind.as_str() {
            "confirmed" => OrderState::Confirmed,
            "expired" => OrderState::Expired,
            "cancelled" => OrderState::Cancelled,
            other => anyhow::bail!("kind {other:?} is not confirmed, expired or cancelled"),
        };
        let order = self.order()?;
        anyhow::ensure!(
            order.pay_by.is_some(),
            "a {kind} transition without pay_by: only pending orders have transitions"
        );
        Ok(PipelineWrite::Transition(Transition {
            order,
            to,
            at: self.time("resolved_at")?,
        }))
    }

    /// The fields as JSON, for the record of a poison entry (an expanded order: the fields its
    /// own entry would have).
    pub fn payload(&self) -> String {
        let mut map = serde_json::Map::new();
        let mut put = |k: &str, v: String| {
            map.insert(k.to_owned(), serde_json::Value::String(v));
        };
        if let Some(line) = &self.line {
            if let Ok((order_id, user, qty, codes)) = line.parts() {
                put("order_id", order_id.to_owned());
                put("user", user.to_owned());
                put("qty", qty.to_owned());
                let codes: Vec<&str> = codes.collect();
                if !codes.is_empty() {
                    put("codes", codes.join("\n"));
                }
            }
            put("at", line.at.timestamp_micros().to_string());
            if let Some(p) = line.pay_by {
                put("pay_by", p.timestamp_micros().to_string());
            }
        }
        for (k, v) in &self.fields {
            put(
                k,
                redis::from_redis_value_ref::<String>(v).unwrap_or_else(|_| format!("{v:?}")),
            );
        }
        serde_json::Value::Object(map).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn entry(fields: &[(&str, &str)]) -> Entry {
        Entry::new(
            "c".into(),
            "1-0".into(),
            fields
                .iter()
                .map(|(k, v)| (k.to_string(), Value::BulkString(v.as_bytes().to_vec())))
                .collect(),
        )
    }

    const ORDER: [(&str, &str); 4] = [
        ("order_id", "c-7"),
        ("user", "u"),
        ("qty", "2"),
        ("at", "1000"),
    ];

    #[test]
    fn entries_without_kind_are_new_orders_pending_with_pay_by() {
        let PipelineWrite::Order(o) = entry(&ORDER).write().unwrap() else {
            panic!("not a new order")
        };
        assert_eq!((o.state, o.pay_by), (OrderState::Active, None));
        let held = [ORDER.as_slice(), &[("pay_by", "5000")]].concat();
        let PipelineWrite::Order(o) = entry(&held).write().unwrap() else {
            panic!("not a new order")
        };
        assert_eq!(o.state, OrderState::Pending);
        assert_eq!(o.pay_by, DateTime::from_timestamp_micros(5000));
    }

    #[test]
    fn transitions_carry_the_whole_order_and_bad_ones_are_refused() {
        let with = |extra: &[(&'static str, &'static str)]| {
            entry(&[ORDER.as_slice(), &[("pay_by", "5000")], extra].concat()).write()
        };
        for (kind, to) in [
            ("confirmed", OrderState::Confirmed),
            ("expired", OrderState::Expired),
            ("cancelled", OrderState::Cancelled),
        ] {
            let w = with(&[("kind", kind), ("resolved_at", "4000")]).unwrap();
            let PipelineWrite::Transition(t) = w else {
                panic!("not a transition")
            };
            assert_eq!((t.to, t.order.qty, t.order.user_id.as_str()), (to, 2, "u"));
            assert_eq!(t.at, DateTime::from_timestamp_micros(4000).unwrap());
        }
        assert!(with(&[("kind", "paid"), ("resolved_at", "1")]).is_err());
        assert!(with(&[("kind", "expired")]).is_err(), "resolved_at missing");
        assert!(with(&[("kind", "expired"), ("resolved_at", "x")]).is_err());
        let no_pay_by = [
            ORDER.as_slice(),
            &[("kind", "expired"), ("resolved_at", "1")],
        ]
        .concat();
        assert!(entry(&no_pay_by).write().is_err());
    }
}
