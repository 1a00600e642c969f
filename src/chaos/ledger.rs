//! The ledger read directly (SQLite or PostgreSQL), not through the API, and held to every
//! guarantee a ledger row can show.
//!
//! The bench checks the invariants through `GET /v1/campaigns/{id}/orders`; an API that hid a
//! duplicate row or a second live holder of a code would pass it. Here the campaign's rows are
//! read with SQL after the drain and checked again: every `won` is exactly one row with the
//! answered buyer and quantity; live units (`active`, `pending`, `confirmed`) within the
//! campaign's total; a code in at most one live order; a buyer's live units within the
//! per-user limit; every confirm answered 200 ends `confirmed` (or `cancelled` by an admin
//! afterwards); no order `confirmed` at or
//! after its `pay_by`, nor `expired` before it; no pending order left once every deadline
//! passed.

use std::collections::{HashMap, HashSet};

use super::cluster::Cluster;
use super::finding::Finding;
use crate::bench::event_spec::Action;
use crate::bench::events::{EventRecord, UNANSWERED};
use crate::bench::{BenchReport, Win};

/// One order row as the ledger holds it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Row {
    pub order_id: String,
    pub user_id: String,
    pub qty: i64,
    /// JSON array of codes (code campaigns).
    pub codes: Option<String>,
    pub state: String,
    pub pay_by: Option<i64>,
    pub resolved_at: Option<i64>,
}

/// The campaign's row: (total, per-user limit).
type Campaign = (i64, i64);

/// The campaign's orders, the campaign's placeholder given (`?` or `$1`).
macro_rules! orders {
    ($param:literal) => {
        concat!(
            "SELECT order_id, user_id, qty, codes, state, pay_by, resolved_at \
             FROM orders WHERE campaign_id = ",
            $param
        )
    };
}

/// The campaign's row, its placeholder given.
macro_rules! campaign_row {
    ($param:literal) => {
        concat!(
            "SELECT total, per_user_limit FROM campaigns WHERE id = ",
            $param
        )
    };
}

/// The campaign's orders and its total and limit, read with SQL.
pub async fn read(cluster: &Cluster, campaign: &str) -> anyhow::Result<(Vec<Row>, Campaign)> {
    use sqlx::Connection;
    if let Some(file) = &cluster.sqlite {
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(file)
            .read_only(true);
        let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
        let rows = sqlx::query_as::<_, Row>(orders!("?"))
            .bind(campaign)
            .fetch_all(&mut c)
            .await?;
        let camp = sqlx::query_as::<_, Campaign>(campaign_row!("?"))
            .bind(campaign)
            .fetch_one(&mut c)
            .await?;
        return Ok((rows, camp));
    }
    let url = cluster
        .pg_url
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("the deployment has no ledger"))?;
    let mut c = sqlx::PgConnection::connect(url).await?;
    let rows = sqlx::query_as::<_, Row>(orders!("$1"))
        .bind(campaign)
        .fetch_all(&mut c)
        .await?;
    let camp = sqlx::query_as::<_, Campaign>(campaign_row!("$1"))
        .bind(campaign)
        .fetch_one(&mut c)
        .await?;
    Ok((rows, camp))
}

fn live(r: &Row) -> bool {
    matches!(r.state.as_str(), "active" | "pending" | "confirmed")
}

/// Every finding the rows show (see the module docs). `confirmed`: orders a confirm of which
/// was answered 200; `held`: the campaign holds its orders (so none may stay pending).
pub fn check(
    wins: &[Win],
    rows: &[Row],
    (total, limit): Campaign,
    confirmed: &HashSet<String>,
    held: bool,
) -> Vec<Finding> {
    let mut out = answered(wins, rows);
    let mut group = |what: String, mut ids: Vec<String>| {
        if !ids.is_empty() {
            ids.sort();
            ids.dedup();
            out.push(Finding { what, orders: ids });
        }
    };
    let live_units: i64 = rows.iter().filter(|r| live(r)).map(|r| r.qty).sum();
    if live_units > total {
        let ids = rows.iter().filter(|r| live(r)).map(|r| r.order_id.clone());
        group(
            format!("the ledger holds {live_units} live units of a total of {total}"),
            ids.collect(),
        );
    }
    let mut holders: HashMap<String, Vec<String>> = HashMap::new();
    let mut per_user: HashMap<&str, (i64, Vec<String>)> = HashMap::new();
    for r in rows.iter().filter(|r| live(r)) {
        let codes: Vec<String> = r
            .codes
            .as_deref()
            .and_then(|c| serde_json::from_str(c).ok())
            .unwrap_or_default();
        for c in codes {
            holders.entry(c).or_default().push(r.order_id.clone());
        }
        let u = per_user.entry(r.user_id.as_str()).or_default();
        u.0 += r.qty;
        u.1.push(r.order_id.clone());
    }
    let shared: Vec<String> = holders
        .into_values()
        .filter(|o| o.len() > 1)
        .flatten()
        .collect();
    group(
        "orders share a code while live, in the ledger".into(),
        shared,
    );
    let over: Vec<String> = per_user
        .into_values()
        .filter(|(n, _)| *n > limit)
        .flat_map(|(_, o)| o)
        .collect();
    group(
        format!("orders of buyers over the limit of {limit}, in the ledger"),
        over,
    );
    let by_id: HashMap<&str, &Row> = rows.iter().map(|r| (r.order_id.as_str(), r)).collect();
    let lost: Vec<String> = confirmed
        .iter()
        // Cancel works on confirmed orders too (the bench's verifier explains each cancel).
        .filter(|id| {
            by_id
                .get(id.as_str())
                .is_none_or(|r| r.state != "confirmed" && r.state != "cancelled")
        })
        .cloned()
        .collect();
    group(
        "orders confirmed with a 200 but not confirmed in the ledger".into(),
        lost,
    );
    let late = |r: &&Row| match (r.state.as_str(), r.pay_by, r.resolved_at) {
        ("confirmed", Some(p), Some(at)) => at >= p,
        ("expired", Some(p), Some(at)) => at < p,
        ("confirmed" | "expired", _, _) => true,
        ("pending", _, _) => held,
        _ => false,
    };
    let ids = rows
        .iter()
        .filter(late)
        .map(|r| r.order_id.clone())
        .collect();
    group(
        "orders resolved against their pay_by (confirmed at or after it, expired before it, \
         no deadline) or still pending after every deadline, in the ledger"
            .into(),
        ids,
    );
    out
}

/// The campaign's total in the ledger is its first stock plus every restock answered 2xx, plus
/// at most the restocks no attempt got an answer for: a restock retried with its
/// Idempotency-Key is added once, and a refused one not at all.
pub fn supply(first: u64, events: &[EventRecord], total: i64) -> Option<Finding> {
    let (mut sure, mut maybe) = (first as i64, 0i64);
    for e in events {
        if let Action::Restock(n) = e.spec.action {
            if e.ok {
                sure += n as i64;
            } else if e.detail.starts_with(UNANSWERED) {
                maybe += n as i64;
            }
        }
    }
    (total < sure || total > sure + maybe).then(|| Finding {
        what: format!(
            "the ledger's total is {total}, but the restocks answered make it {sure} (up to {} \
             with the unanswered ones)",
            sure + maybe
        ),
        orders: vec![],
    })
}

/// Every `won` is exactly one row of the ledger, with the answered user and quantity.
fn answered(wins: &[Win], rows: &[Row]) -> Vec<Finding> {
    let mut by_id: HashMap<&str, Vec<&Row>> = HashMap::new();
    for r in rows {
        by_id.entry(r.order_id.as_str()).or_default().push(r);
    }
    let (mut missing, mut twice, mut differ) = (Vec::new(), Vec::new(), Vec::new());
    for w in wins {
        match by_id.get(w.order_id.as_str()).map(Vec::as_slice) {
            None | Some([]) => missing.push(w.order_id.clone()),
            Some([r]) if r.user_id != w.user || r.qty as u64 != w.qty => {
                differ.push(w.order_id.clone())
            }
            Some([_]) => {}
            Some(_) => twice.push(w.order_id.clone()),
        }
    }
    let mut out = Vec::new();
    for (mut ids, what) in [
        (missing, "answered won but absent from the ledger's table"),
        (
            twice,
            "answered won and in the ledger's table more than once",
        ),
        (
            differ,
            "answered won but the ledger's row has another user or qty",
        ),
    ] {
        if !ids.is_empty() {
            ids.sort();
            ids.dedup();
            out.push(Finding {
                what: format!("{} orders {what}", ids.len()),
                orders: ids,
            });
        }
    }
    out
}

/// Answered `won`s the ledger does not hold as answered (absent, or their id holds another
/// buyer's order), by order id. After a failover: the wins the promoted replica never had.
/// They are violations all the same; the campaign counts and lists them apart as "lost to
/// failover" so that the cost of an asynchronous replica is measured, not guessed.
pub async fn lost_wins(report: &BenchReport, cluster: &Cluster) -> anyhow::Result<Vec<String>> {
    let (rows, _) = read(cluster, &report.campaign).await?;
    let held: HashMap<&str, &str> = rows
        .iter()
        .map(|r| (r.order_id.as_str(), r.user_id.as_str()))
        .collect();
    let mut ids: Vec<String> = report
        .wins
        .iter()
        .filter(|w| held.get(w.order_id.as_str()) != Some(&w.user.as_str()))
        .map(|w| w.order_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    Ok(ids)
}

#[cfg(test)]
mod tests;
