//! Batch entries: `claims.lua` appends one stream entry per script call, holding every order
//! the call won, because Redis pays for a stream entry three times (XADD, the XREADGROUP reply,
//! the acknowledgement) whatever it holds. Here such an entry is turned back into one [`Entry`]
//! per order, each keeping its line and the batch's parsed times rather than a map of fields:
//! building and reading those maps was the largest cost of moving a won order into the ledger.

use std::collections::HashMap;
use std::str::Split;

use anyhow::anyhow;
use chrono::{DateTime, Utc};

use super::Entry;

/// The field of a batch entry that holds its orders.
pub(super) const ORDERS: &str = "orders";

/// One order line of a batch entry (order_id, user, qty, codes; tab-separated) and the times
/// the batch's orders share.
#[derive(Debug, Clone)]
pub(super) struct Line {
    text: String,
    pub(super) at: DateTime<Utc>,
    pub(super) pay_by: Option<DateTime<Utc>>,
}

/// An order line's order id, user and qty (none of them empty) and its codes.
type Parts<'a> = (&'a str, &'a str, &'a str, Split<'a, char>);

fn parts(line: &str) -> anyhow::Result<Parts<'_>> {
    let mut split = line.split('\t');
    let mut next = |name| {
        split
            .next()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| anyhow!("an order line lacks its {name}: {line:?}"))
    };
    let (order_id, user, qty) = (next("order_id")?, next("user")?, next("qty")?);
    Ok((order_id, user, qty, split))
}

impl Line {
    /// Its order id, user, qty and codes (checked when the batch was unpacked).
    pub(super) fn parts(&self) -> anyhow::Result<Parts<'_>> {
        parts(&self.text)
    }
}

impl Entry {
    /// The entries this stream entry stands for: one per order of a batch entry, each with the
    /// batch's stream id (acknowledged once all of them are in the ledger); any other entry is
    /// itself. A batch entry that does not unpack is returned whole, and [`Entry::write`] says
    /// why it is poison.
    pub fn expand(self) -> Vec<Entry> {
        if !self.fields.contains_key(ORDERS) {
            return vec![self];
        }
        match self.unpack() {
            Ok(orders) => orders,
            Err(_) => vec![self],
        }
    }

    /// The orders this entry carries: those of a batch entry that did not unpack (one line
    /// each), else one (an expanded order, a single order, a transition).
    pub fn orders_carried(&self) -> u64 {
        match self.fields.get(ORDERS) {
            None => 1,
            Some(v) => redis::from_redis_value_ref::<String>(v)
                .map(|t| t.split('\n').count() as u64)
                .unwrap_or(1),
        }
    }

    /// The orders of a batch entry, one entry each. The batch is poison as a whole when its
    /// shared fields are not `at`, an optional `pay_by` (both times) and an optional `lineage`,
    /// or when a line lacks its order id, user or qty; a line whose values are bad is poison
    /// alone ([`Entry::order`]).
    pub(super) fn unpack(&self) -> anyhow::Result<Vec<Entry>> {
        let lines = self.text(ORDERS)?;
        for name in self.fields.keys() {
            anyhow::ensure!(
                name == ORDERS || name == "at" || name == "pay_by" || name == super::LINEAGE,
                "a batch entry carries field {name:?}"
            );
        }
        let at = self.time("at")?;
        let pay_by = match self.fields.contains_key("pay_by") {
            false => None,
            true => Some(self.time("pay_by")?),
        };
        let mut out = Vec::new();
        for line in lines.split('\n') {
            parts(line)?;
            out.push(Entry {
                campaign_id: self.campaign_id.clone(),
                stream_id: self.stream_id.clone(),
                fields: HashMap::new(),
                line: Some(Line {
                    text: line.to_owned(),
                    at,
                    pay_by,
                }),
                origin: self.origin.clone(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::super::tests::entry;
    use crate::domain::{Order, OrderState};

    #[test]
    fn a_batch_entry_expands_into_its_orders_under_one_stream_id() {
        let batch = entry(&[
            ("at", "1000"),
            ("pay_by", "5000"),
            ("orders", "c-7\tu\t2\nc-8\tv\t1\tA1\nc-9\tw w\t2\tB1\tB2"),
        ]);
        let all = batch.expand();
        assert_eq!(all.len(), 3);
        assert!(all.iter().all(|e| e.stream_id == "1-0"));
        let orders: Vec<Order> = all.iter().map(|e| e.order().unwrap()).collect();
        let shape: Vec<(&str, &str, u64, Option<Vec<String>>)> = orders
            .iter()
            .map(|o| {
                (
                    o.order_id.as_str(),
                    o.user_id.as_str(),
                    o.qty,
                    o.codes.clone(),
                )
            })
            .collect();
        let codes = |c: &[&str]| Some(c.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            shape,
            [
                ("c-7", "u", 2, None),
                ("c-8", "v", 1, codes(&["A1"])),
                ("c-9", "w w", 2, codes(&["B1", "B2"])),
            ]
        );
        assert!(orders.iter().all(|o| o.state == OrderState::Pending
            && o.pay_by == DateTime::from_timestamp_micros(5000)
            && o.created_at == DateTime::from_timestamp_micros(1000).unwrap()));
        let plain = entry(&[("at", "1000"), ("orders", "c-7\tu\t2")]).expand();
        assert_eq!(plain[0].order().unwrap().state, OrderState::Active);
    }

    #[test]
    fn a_batch_entry_that_does_not_unpack_stays_whole_and_is_poison() {
        for bad in [
            &[("at", "1000"), ("orders", "")][..],
            &[("at", "1000"), ("orders", "c-7\tu\t2\nc-8\tv")],
            &[("at", "1000"), ("orders", "c-7\t\t2")],
            &[("at", "1000"), ("kind", "expired"), ("orders", "c-7\tu\t2")],
        ] {
            let all = entry(bad).expand();
            assert_eq!(all.len(), 1, "{bad:?}");
            let why = format!("{:#}", all[0].write().unwrap_err());
            assert!(why.contains("does not unpack"), "{why}");
        }
        let zero = entry(&[("at", "1000"), ("orders", "c-7\tu\t0")]).expand();
        assert!(zero[0].write().is_err(), "qty 0 is poison, alone");
    }
}
