//! The live counts of the embedded ledger's rules (`ledger::invariants`), kept for the orders a
//! batch inserts: once per batch, not by a trigger per row.
//!
//! Every won claim inserts an order, and a row trigger doing the same work cost about 31,000
//! instructions per durable win under callgrind (65,800 → 97,200: a trigger program, an UPDATE
//! of the campaign and two checks per row). Here a batch costs one guarded UPDATE per campaign
//! (`live_units + n <= total`, or the batch is refused), one multi-row upsert of the buyers'
//! holdings whose CHECK (`holdings_within_limit`, `units <= cap`) holds each buyer to the
//! limit, and, for code campaigns, one insert of the codes into `live_codes` (a code held twice
//! breaks its primary key). Changes of state are counted by migration 0008's triggers.

use std::collections::BTreeMap;

use sqlx::SqliteConnection;

use super::shaped::{shaped, ShapedSql};
use crate::domain::{Order, OrderState};

static UPSERT_HOLDINGS: ShapedSql = ShapedSql::new(
    "INSERT INTO holdings (campaign_id, user_id, units, cap)",
    4,
    " ON CONFLICT (campaign_id, user_id) DO UPDATE \
     SET units = units + excluded.units, cap = excluded.cap",
);

static INSERT_CODES: ShapedSql = ShapedSql::new(
    "INSERT INTO live_codes (campaign_id, code, order_id)",
    3,
    "",
);

fn live(o: &Order) -> bool {
    matches!(
        o.state,
        OrderState::Active | OrderState::Pending | OrderState::Confirmed
    )
}

/// Counts `orders` (just inserted, in the writer's transaction); an error names the rule the
/// batch would break.
pub(super) async fn count_inserted(
    conn: &mut SqliteConnection,
    orders: &[&Order],
) -> anyhow::Result<()> {
    let mut per_campaign: BTreeMap<&str, i64> = BTreeMap::new();
    let mut per_user: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    let mut codes: Vec<(&str, &str, &str)> = Vec::new();
    for o in orders.iter().filter(|o| live(o)) {
        *per_campaign.entry(&o.campaign_id).or_default() += o.qty as i64;
        *per_user.entry((&o.campaign_id, &o.user_id)).or_default() += o.qty as i64;
        for code in o.codes.iter().flatten() {
            codes.push((&o.campaign_id, code, &o.order_id));
        }
    }
    let mut caps: BTreeMap<&str, i64> = BTreeMap::new();
    for (campaign, units) in &per_campaign {
        let cap: Option<i64> = sqlx::query_scalar(
            "UPDATE campaigns SET live_units = live_units + ?1 \
             WHERE id = ?2 AND live_units + ?1 <= total RETURNING per_user_limit",
        )
        .bind(units)
        .bind(campaign)
        .fetch_all(&mut *conn)
        .await?
        .first()
        .copied();
        let cap = cap.ok_or_else(|| {
            anyhow::anyhow!(
                "campaign_live_within_total: {units} more live units would exceed the total of \
                 campaign {campaign}"
            )
        })?;
        caps.insert(campaign, cap);
    }
    let rows: Vec<(&str, &str, i64, i64)> = per_user
        .into_iter()
        .map(|((c, u), n)| (c, u, n, caps[c]))
        .collect();
    for chunk in shaped(&rows) {
        let mut q = sqlx::query(UPSERT_HOLDINGS.get(chunk.len()));
        for (c, u, n, cap) in chunk {
            q = q.bind(*c).bind(*u).bind(*n).bind(*cap);
        }
        q.execute(&mut *conn).await?;
    }
    for chunk in shaped(&codes) {
        let mut q = sqlx::query(INSERT_CODES.get(chunk.len()));
        for (c, code, order) in chunk {
            q = q.bind(*c).bind(*code).bind(*order);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}
