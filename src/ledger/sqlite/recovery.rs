//! Streaming the SQLite ledger into a [`Recovery`] at start: campaign definitions with their
//! highest order number, every code, the active orders and the idempotency answers still
//! within their retention.
//!
//! Every query is streamed (never `fetch_all`), so a ledger of ten million orders costs the
//! memory of the state rebuilt from it, not of its rows. The active orders are read campaign
//! by campaign in ranges of seq, through the `(campaign_id, seq)` index the claim path already
//! pays for (no sort, no extra index). sqlx hands every row from its SQLite thread to the async
//! side, about a microsecond a row — most of a million-order restart — so each range comes
//! back as one row: its orders joined by `group_concat` with the ASCII record and unit
//! separators, which the API never lets into a user id, with the count of orders beside it.
//! A range whose pack does not unpack into exactly that many well-formed orders (a ledger
//! written by something else) is read again row by row, so the result never depends on what
//! the ids contain.

use std::collections::HashSet;

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use sqlx::{Row, SqliteConnection};

use crate::domain::{CampaignDef, WaitingRoom};
use crate::domain::{Kind, Status};
use crate::ledger::rows::{self, micros};
use crate::ledger::{IdemRecord, Recovery, StoredCampaign, Wanted};

/// Orders (by seq) per pack; one pack is a few hundred KB.
const SEQS_PER_PACK: i64 = 8192;

/// The active orders of campaign ?1 with seq in (?2, ?3]: how many, and each as
/// `user US qty US codes-JSON-or-nothing`, joined by RS.
const PACKED_ACTIVE: &str = "SELECT count(*), group_concat(\
       user_id || char(31) || qty || char(31) || ifnull(codes, ''), char(30)) \
     FROM orders WHERE campaign_id = ?1 AND seq > ?2 AND seq <= ?3 AND state IN ('active', 'confirmed')";

/// The same orders one row each, for a range whose pack did not verify.
const ROWS_ACTIVE: &str = "SELECT user_id, qty, ifnull(codes, '') \
     FROM orders WHERE campaign_id = ?1 AND seq > ?2 AND seq <= ?3 AND state IN ('active', 'confirmed')";

/// The pending orders (campaigns with holds), through the partial index `orders_pending`.
const PENDING: &str = "SELECT campaign_id, seq, user_id, qty, ifnull(codes, ''), pay_by \
     FROM orders WHERE state = 'pending' AND (?1 IS NULL OR campaign_id = ?1)";

/// Streams the ledger into `into`: every campaign, or only campaign `only` (a campaign the
/// engine left unloaded at start and needs now). A whole read first drops the idempotency
/// answers older than `idem_since`.
pub(super) async fn recover(
    conn: &mut SqliteConnection,
    idem_since: DateTime<Utc>,
    only: Option<&str>,
    into: &mut dyn Recovery,
) -> anyhow::Result<()> {
    if only.is_none() {
        prune_answers(conn, idem_since).await;
    }
    let campaigns = sqlx::query(
        "SELECT id, kind, total, per_user_limit, status, starts_at, ends_at, hold_seconds, live_units, \
         waiting_room FROM campaigns WHERE ?1 IS NULL OR id = ?1 ORDER BY created_at",
    )
    .bind(only)
    .fetch_all(&mut *conn)
    .await?;
    // The pending ones through the partial index `orders_pending` (few rows); the answered
    // ones through `idempotency_by_age`, a pass over the answers kept, read again below.
    let pending: HashSet<String> = sqlx::query_scalar(
        "SELECT DISTINCT campaign_id FROM orders WHERE state = 'pending' AND (?1 IS NULL OR campaign_id = ?1)",
    )
    .bind(only)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    let answered: HashSet<String> = sqlx::query_scalar(
        "SELECT DISTINCT campaign_id FROM idempotency WHERE created_at >= ?1 AND (?2 IS NULL OR campaign_id = ?2)",
    )
    .bind(micros(idem_since))
    .bind(only)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    let mut wanted = Vec::with_capacity(campaigns.len());
    for r in campaigns {
        let id: String = r.get(0);
        let kind: String = r.get(1);
        let status: String = r.get(4);
        let max_seq: Option<i64> =
            sqlx::query_scalar("SELECT MAX(seq) FROM orders WHERE campaign_id = ?")
                .bind(&id)
                .fetch_one(&mut *conn)
                .await?;
        let stored = StoredCampaign {
            def: CampaignDef {
                kind: Kind::parse(&kind).ok_or_else(|| anyhow!("bad kind {kind:?}"))?,
                per_user_limit: r.get::<i64, _>(3) as u64,
                starts_at: rows::opt_time(r.get(5))?,
                ends_at: rows::opt_time(r.get(6))?,
                hold_seconds: r.get::<Option<i64>, _>(7).map(|h| h as u32),
                waiting_room: r
                    .get::<Option<String>, _>(9)
                    .as_deref()
                    .map(WaitingRoom::from_ledger)
                    .transpose()?,
                id: id.clone(),
            },
            total: r.get::<i64, _>(2) as u64,
            status: Status::parse(&status).ok_or_else(|| anyhow!("bad status {status:?}"))?,
            max_seq: max_seq.unwrap_or(0) as u64,
            live_units: r.get::<i64, _>(8) as u64,
            pending: pending.contains(&id),
            answers: answered.contains(&id),
        };
        if into.campaign(stored)? == Wanted::Everything {
            wanted.push((id, max_seq.unwrap_or(0)));
        }
    }
    for (id, _) in &wanted {
        let mut codes =
            sqlx::query("SELECT code FROM campaign_codes WHERE campaign_id = ? ORDER BY pos")
                .bind(id)
                .fetch(&mut *conn);
        while let Some(r) = codes.try_next().await? {
            into.code(id, r.get(0))?;
        }
    }
    for (id, max_seq) in &wanted {
        let mut from = 0;
        while from < *max_seq {
            let to = from.saturating_add(SEQS_PER_PACK).min(*max_seq);
            active_range(conn, id, from, to, into).await?;
            from = to;
        }
    }
    let wanted: HashSet<&str> = wanted.iter().map(|(id, _)| id.as_str()).collect();
    {
        let mut pending = sqlx::query(PENDING).bind(only).fetch(&mut *conn);
        while let Some(r) = pending.try_next().await? {
            let campaign: &str = r.get(0);
            if !wanted.contains(campaign) {
                continue;
            }
            let codes = codes_of(r.get(4))?;
            let pay_by: Option<i64> = r.get(5);
            let pay_by = pay_by.ok_or_else(|| anyhow!("pending order without pay_by"))?;
            let row = crate::ledger::PendingRow {
                seq: r.get::<i64, _>(1) as u64,
                user_id: r.get(2),
                qty: r.get::<i64, _>(3) as u64,
                codes: &codes,
                pay_by: rows::time(pay_by)?,
            };
            into.pending(campaign, row)?;
        }
    }
    let mut idem = sqlx::query(
        "SELECT campaign_id, user_id, key, answer, created_at FROM idempotency \
         WHERE created_at >= ?1 AND (?2 IS NULL OR campaign_id = ?2)",
    )
    .bind(micros(idem_since))
    .bind(only)
    .fetch(&mut *conn);
    while let Some(r) = idem.try_next().await? {
        let campaign_id: String = r.get(0);
        if !wanted.contains(campaign_id.as_str()) {
            continue;
        }
        into.idem(IdemRecord {
            campaign_id,
            user_id: r.get(1),
            key: r.get(2),
            answer: rows::parse_answer(r.get(3))?,
            created_at: rows::time(r.get(4))?,
        })?;
    }
    Ok(())
}

/// The engine forgets answers older than `idem_since`; their rows go first (best effort: a
/// ledger that cannot write still starts), so a key claimed afresh never meets a `won` row
/// the engine does not know of, which the ledger would refuse as a contradiction.
async fn prune_answers(conn: &mut SqliteConnection, idem_since: DateTime<Utc>) {
    if let Err(e) = sqlx::query("DELETE FROM idempotency WHERE created_at < ?")
        .bind(micros(idem_since))
        .execute(&mut *conn)
        .await
    {
        tracing::warn!(error = %e, "pruning idempotency answers past their retention failed");
    }
}

/// Hands the live orders (active or confirmed) of campaign `id` with seq in (`from`, `to`] to `into`.
async fn active_range(
    conn: &mut SqliteConnection,
    id: &str,
    from: i64,
    to: i64,
    into: &mut dyn Recovery,
) -> anyhow::Result<()> {
    let r = sqlx::query(PACKED_ACTIVE)
        .bind(id)
        .bind(from)
        .bind(to)
        .fetch_one(&mut *conn)
        .await?;
    let count = r.get::<i64, _>(0) as usize;
    let pack = r.get::<Option<&str>, _>(1).unwrap_or_default();
    if let Some(orders) = unpack(pack, count) {
        for (user, qty, codes) in orders {
            into.order(id, user, qty, &codes_of(codes)?)?;
        }
        return Ok(());
    }
    let mut rows = sqlx::query(ROWS_ACTIVE)
        .bind(id)
        .bind(from)
        .bind(to)
        .fetch(&mut *conn);
    while let Some(r) = rows.try_next().await? {
        let codes = codes_of(r.get(2))?;
        into.order(id, r.get(0), r.get::<i64, _>(1) as u64, &codes)?;
    }
    Ok(())
}

fn codes_of(json: &str) -> anyhow::Result<Vec<String>> {
    match json {
        "" => Ok(Vec::new()),
        json => Ok(rows::parse_codes(Some(json.to_owned()))?.unwrap_or_default()),
    }
}

/// The (user, qty, codes JSON or "") of a [`PACKED_ACTIVE`] pack, if it holds exactly `count`
/// well-formed orders.
fn unpack(pack: &str, count: usize) -> Option<Vec<(&str, u64, &str)>> {
    if count == 0 {
        return pack.is_empty().then(Vec::new);
    }
    let mut out = Vec::with_capacity(count);
    for record in pack.split('\x1e') {
        let mut fields = record.split('\x1f');
        let (user, qty, codes) = (fields.next()?, fields.next()?, fields.next()?);
        if fields.next().is_some() || user.is_empty() {
            return None;
        }
        out.push((user, qty.parse().ok()?, codes));
    }
    (out.len() == count).then_some(out)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::unpack;
    use crate::domain::CampaignDef;
    use crate::domain::{Kind, Order, OrderState, Status};
    use crate::ledger::{
        IdemRecord, Ledger, LedgerWrite, Recovery, SqliteLedger, StoredCampaign, Wanted,
    };

    #[derive(Default)]
    struct Rows(Vec<(String, String, u64, Vec<String>)>);

    impl Recovery for Rows {
        fn campaign(&mut self, _: StoredCampaign) -> anyhow::Result<Wanted> {
            Ok(Wanted::Everything)
        }
        fn code(&mut self, _: &str, _: String) -> anyhow::Result<()> {
            Ok(())
        }
        fn order(&mut self, c: &str, u: &str, qty: u64, codes: &[String]) -> anyhow::Result<()> {
            self.0.push((c.into(), u.into(), qty, codes.to_vec()));
            Ok(())
        }
        fn idem(&mut self, _: IdemRecord) -> anyhow::Result<()> {
            Ok(())
        }
    }

    /// Ids the API refuses (separators inside) still come back exactly: their range is read
    /// row by row.
    #[tokio::test]
    async fn orders_whose_ids_hold_the_separators_recover_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open(dir.path(), false).await.unwrap();
        let def = CampaignDef {
            id: "p".into(),
            kind: Kind::Codes,
            per_user_limit: 5,
            starts_at: None,
            ends_at: None,
            hold_seconds: None,
            waiting_room: None,
        };
        let codes: Vec<String> = ["A", "B\x1eC", "D", "E"].map(String::from).to_vec();
        let users = ["plain", "rs\x1einside", "us\x1finside", "plain"];
        let mut writes = vec![LedgerWrite::CreateCampaign {
            def,
            total: 4,
            codes: codes.clone(),
            status: Status::Active,
            at: Utc::now(),
        }];
        for (i, user) in users.iter().enumerate() {
            writes.push(LedgerWrite::Order(Order {
                order_id: format!("p-{}", i + 1),
                campaign_id: "p".into(),
                user_id: (*user).into(),
                qty: 1,
                codes: Some(vec![codes.get(i).cloned().unwrap_or_default()]),
                state: OrderState::Active,
                created_at: Utc::now(),
                cancelled_at: None,
                pay_by: None,
                resolved_at: None,
            }));
        }
        ledger
            .apply(&writes.iter().collect::<Vec<_>>())
            .await
            .unwrap();
        let mut rows = Rows::default();
        ledger.recover(Utc::now(), &mut rows).await.unwrap();
        rows.0.sort();
        let mut want: Vec<_> = users
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let code = codes.get(i).cloned().unwrap_or_default();
                ("p".to_string(), u.to_string(), 1, vec![code])
            })
            .collect();
        want.sort();
        assert_eq!(rows.0, want);
    }

    #[test]
    fn packs_unpack_only_when_they_hold_exactly_the_orders_counted() {
        let pack = "u1\x1f3\x1f\x1e用\x1f1\x1f[\"K1\",\"K:2\"]";
        let want = vec![("u1", 3, ""), ("用", 1, "[\"K1\",\"K:2\"]")];
        assert_eq!(unpack(pack, 2), Some(want));
        assert_eq!(unpack(pack, 3), None, "an id holding a separator");
        assert_eq!(
            unpack("a\x1fb\x1f1\x1f", 1),
            None,
            "an id holding a separator"
        );
        assert_eq!(unpack("u1\x1fx\x1f", 1), None);
        assert_eq!(unpack("", 0), Some(vec![]));
    }
}
