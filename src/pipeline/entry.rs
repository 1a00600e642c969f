//! Stream entries of the order pipeline: what `claim.lua` appends, parsed back into orders.

use std::collections::HashMap;

use anyhow::{anyhow, Context};
use redis::Value;

use crate::domain::{Order, OrderState};

/// One entry read from a campaign's order stream.
#[derive(Debug, Clone)]
pub struct Entry {
    pub campaign_id: String,
    pub stream_id: String,
    pub fields: HashMap<String, Value>,
}

impl Entry {
    fn text(&self, name: &str) -> anyhow::Result<String> {
        let v = self
            .fields
            .get(name)
            .ok_or_else(|| anyhow!("field {name} is missing"))?;
        redis::from_redis_value(v).with_context(|| format!("field {name} is not text"))
    }

    /// The order this entry carries. An entry that does not parse is poison.
    pub fn order(&self) -> anyhow::Result<Order> {
        let order_id = self.text("order_id")?;
        let (campaign, _) = crate::domain::parse_order_id(&order_id)
            .map_err(|_| anyhow!("order id {order_id:?} is malformed"))?;
        anyhow::ensure!(
            campaign == self.campaign_id,
            "order {order_id} is in the stream of campaign {}",
            self.campaign_id
        );
        let qty: u64 = self.text("qty")?.parse().context("qty is not a number")?;
        anyhow::ensure!(qty >= 1, "qty is 0");
        let at: i64 = self.text("at")?.parse().context("at is not a number")?;
        let codes = match self.fields.contains_key("codes") {
            false => None,
            true => Some(self.text("codes")?.split('\n').map(str::to_owned).collect()),
        };
        Ok(Order {
            order_id,
            campaign_id: self.campaign_id.clone(),
            user_id: self.text("user")?,
            qty,
            codes,
            state: OrderState::Active,
            created_at: chrono::DateTime::from_timestamp_micros(at)
                .ok_or_else(|| anyhow!("at {at} is out of range"))?,
            cancelled_at: None,
            pay_by: None,
            resolved_at: None,
        })
    }

    /// The fields as JSON, for the record of a poison entry.
    pub fn payload(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .fields
            .iter()
            .map(|(k, v)| {
                let text =
                    redis::from_redis_value::<String>(v).unwrap_or_else(|_| format!("{v:?}"));
                (k.clone(), serde_json::Value::String(text))
            })
            .collect();
        serde_json::Value::Object(map).to_string()
    }
}
