//! Streaming the SQLite ledger into a [`Recovery`] at start: campaign definitions with their
//! highest order number, every code, the active orders and the idempotency answers still
//! within their retention.
//!
//! Every query is streamed (never `fetch_all`), so a ledger of ten million orders costs the
//! memory of the state rebuilt from it, not of its rows. The active orders are read in one
//! sequential pass over the `orders` table in rowid ranges: cheaper than walking an index per
//! campaign and then each row, and it needs no index beyond those the claim path already pays
//! for. sqlx hands every row from its SQLite thread to the async side (about a microsecond a
//! row, most of a million-order restart), so each range comes back packed into one string per
//! campaign (`group_concat`, length-prefixed) and is unpacked here: the per-row cost left is
//! SQLite's own. The highest seq comes from the `(campaign_id, seq)` index, one lookup per
//! campaign.

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use sqlx::{Row, SqliteConnection};

use super::rows::{self, micros};
use super::{IdemRecord, Recovery, StoredCampaign};
use crate::domain::{Kind, Status};
use crate::engine::state::CampaignDef;

/// Rows of `orders` (by rowid) packed per query; one pack of a campaign is a few hundred KB.
const ROWS_PER_PACK: i64 = 8192;

/// The active orders among rowids (?1, ?2], one row per campaign, each order packed as
/// `<bytes of user>:<user><qty> <bytes of codes>:<codes JSON or nothing>` — length-prefixed, so
/// no user id or code can be mistaken for a separator.
const PACKED_ACTIVE: &str = "SELECT campaign_id, group_concat(\
       length(CAST(user_id AS BLOB)) || ':' || user_id || qty || ' ' \
       || length(CAST(ifnull(codes, '') AS BLOB)) || ':' || ifnull(codes, ''), '') \
     FROM orders WHERE rowid > ?1 AND rowid <= ?2 AND state = 'active' GROUP BY campaign_id";

pub(super) async fn recover(
    conn: &mut SqliteConnection,
    idem_since: DateTime<Utc>,
    into: &mut dyn Recovery,
) -> anyhow::Result<()> {
    let campaigns = sqlx::query(
        "SELECT id, kind, total, per_user_limit, status, starts_at, ends_at FROM campaigns ORDER BY created_at",
    )
    .fetch_all(&mut *conn)
    .await?;
    for r in campaigns {
        let id: String = r.get(0);
        let kind: String = r.get(1);
        let status: String = r.get(4);
        let max_seq: Option<i64> =
            sqlx::query_scalar("SELECT MAX(seq) FROM orders WHERE campaign_id = ?")
                .bind(&id)
                .fetch_one(&mut *conn)
                .await?;
        into.campaign(StoredCampaign {
            def: CampaignDef {
                kind: Kind::parse(&kind).ok_or_else(|| anyhow!("bad kind {kind:?}"))?,
                per_user_limit: r.get::<i64, _>(3) as u64,
                starts_at: rows::opt_time(r.get(5))?,
                ends_at: rows::opt_time(r.get(6))?,
                id,
            },
            total: r.get::<i64, _>(2) as u64,
            status: Status::parse(&status).ok_or_else(|| anyhow!("bad status {status:?}"))?,
            max_seq: max_seq.unwrap_or(0) as u64,
        })?;
    }
    {
        let mut codes =
            sqlx::query("SELECT campaign_id, code FROM campaign_codes ORDER BY campaign_id, pos")
                .fetch(&mut *conn);
        while let Some(r) = codes.try_next().await? {
            into.code(r.get(0), r.get(1))?;
        }
    }
    let (first, last): (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT MIN(rowid), MAX(rowid) FROM orders")
            .fetch_one(&mut *conn)
            .await?;
    if let (Some(first), Some(last)) = (first, last) {
        let mut from = first - 1;
        while from < last {
            let to = from.saturating_add(ROWS_PER_PACK).min(last);
            let mut packs = sqlx::query(PACKED_ACTIVE)
                .bind(from)
                .bind(to)
                .fetch(&mut *conn);
            while let Some(r) = packs.try_next().await? {
                let campaign: &str = r.get(0);
                for order in Unpack(r.get::<Option<&str>, _>(1).unwrap_or_default()) {
                    let (user, qty, codes) = order?;
                    let codes = match codes {
                        "" => Vec::new(),
                        json => rows::parse_codes(Some(json.to_owned()))?.unwrap_or_default(),
                    };
                    into.order(campaign, user, qty, &codes)?;
                }
            }
            from = to;
        }
    }
    let mut idem = sqlx::query(
        "SELECT campaign_id, user_id, key, answer, created_at FROM idempotency WHERE created_at >= ?",
    )
    .bind(micros(idem_since))
    .fetch(&mut *conn);
    while let Some(r) = idem.try_next().await? {
        into.idem(IdemRecord {
            campaign_id: r.get(0),
            user_id: r.get(1),
            key: r.get(2),
            answer: rows::parse_answer(r.get(3))?,
            created_at: rows::time(r.get(4))?,
        })?;
    }
    Ok(())
}

/// Reads the orders of one [`PACKED_ACTIVE`] pack: (user, qty, codes JSON or "").
struct Unpack<'a>(&'a str);

impl<'a> Unpack<'a> {
    /// Text up to `stop` (excluded), and the rest after it.
    fn until(&mut self, stop: char) -> anyhow::Result<&'a str> {
        let at = self.0.find(stop).ok_or_else(|| anyhow!("bad order pack"))?;
        let head = &self.0[..at];
        self.0 = &self.0[at + 1..];
        Ok(head)
    }

    fn sized(&mut self) -> anyhow::Result<&'a str> {
        let len: usize = self.until(':')?.parse()?;
        let text = self.0.get(..len).ok_or_else(|| anyhow!("bad order pack"))?;
        self.0 = &self.0[len..];
        Ok(text)
    }

    fn order(&mut self) -> anyhow::Result<(&'a str, u64, &'a str)> {
        let user = self.sized()?;
        let qty = self.until(' ')?.parse()?;
        Ok((user, qty, self.sized()?))
    }
}

impl<'a> Iterator for Unpack<'a> {
    type Item = anyhow::Result<(&'a str, u64, &'a str)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let order = self.order();
        if order.is_err() {
            self.0 = "";
        }
        Some(order)
    }
}

#[cfg(test)]
mod tests {
    use super::Unpack;

    #[test]
    fn packs_unpack_whatever_the_ids_hold() {
        let pack = "2:u13 0:6:a:1 2 0 0:3:用1 12:[\"K1\",\"K:2\"]";
        let got: Vec<_> = Unpack(pack).collect::<anyhow::Result<_>>().unwrap();
        assert_eq!(
            got,
            vec![
                ("u1", 3, ""),
                ("a:1 2 ", 0, ""),
                ("用", 1, "[\"K1\",\"K:2\"]")
            ]
        );
        assert!(Unpack("5:u1").next().unwrap().is_err());
        assert_eq!(Unpack("").count(), 0);
    }
}
