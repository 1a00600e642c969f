//! What the ledger refused of a campaign after a restore, as `failed_orders` records it: the
//! evidence [`super::Excused`] needs before it excuses a refused `won`, or a confirm whose 200
//! was about another buyer's order under a reissued number.

use std::collections::HashSet;
use std::time::SystemTime;

use crate::chaos::cluster::Cluster;
use crate::ledger::DIFFERENT_ORDER;

/// A gate's `confirmed` refused as another order: (order id, buyer, `pay_by` in µs).
pub(super) type Contradicted = (String, String, Option<i64>);

/// What the ledger refused of the campaign between `since` and `until`: (order id, buyer) of
/// the new orders refused as a reissued id or by a ledger rule (scale-out's `failed_orders`; a
/// poison entry is never excused), and (order id, buyer, `pay_by` in µs) of the gate's
/// `confirmed` transitions refused as another order than the one the ledger holds under that
/// number.
pub(super) async fn failed_orders(
    cluster: &Cluster,
    campaign: &str,
    since: SystemTime,
    until: SystemTime,
) -> anyhow::Result<(HashSet<(String, String)>, HashSet<Contradicted>)> {
    use sqlx::Connection;
    let Some(url) = cluster.pg_url.as_deref() else {
        return Ok(Default::default());
    };
    let micros = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0)
    };
    let mut c = sqlx::PgConnection::connect(url).await?;
    let rows: Vec<(Option<String>, String, String)> = sqlx::query_as(
        "SELECT order_id, payload, reason FROM failed_orders \
         WHERE campaign_id = $1 AND at >= $2 AND at <= $3",
    )
    .bind(campaign)
    .bind(micros(since))
    .bind(micros(until))
    .fetch_all(&mut c)
    .await?;
    let (mut refused, mut contradicted) = (HashSet::new(), HashSet::new());
    for (id, payload, reason) in rows {
        let Ok(fields) = serde_json::from_str::<serde_json::Value>(&payload) else {
            continue;
        };
        let field = |k: &str| fields.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        let (Some(id), Some(user)) = (id, field("user")) else {
            continue;
        };
        match field("kind").as_deref() {
            // A new order's entry carries no `kind`.
            None if reason == crate::pipeline::REISSUED
                || reason.starts_with(crate::pipeline::LEDGER_RULE) =>
            {
                refused.insert((id, user));
            }
            Some("confirmed") if reason.starts_with(DIFFERENT_ORDER) => {
                let pay_by = field("pay_by").and_then(|p| p.parse().ok());
                contradicted.insert((id, user, pay_by));
            }
            _ => {}
        }
    }
    Ok((refused, contradicted))
}
