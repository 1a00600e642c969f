//! The verdict on one schedule: the bench's invariants, the answers the contract allows, the
//! ledger read directly, and processes that died on their own.
//!
//! `seckill bench` already reads the campaign and every order back through the API and checks
//! the invariants of `shared/ARCHITECTURE.md` (no oversell, no code twice, per-user limits,
//! every `won` listed exactly once as answered, no order beyond the answers that were lost,
//! remaining consistent, one answer per Idempotency-Key, no under-sell once a `sold_out` came
//! after the last supply change). A 503 carrying `"outcome": "unknown"` and a request with no
//! answer at all count as "maybe won"; every other 503 as "nothing changed", so an order they
//! left behind is a phantom. Here the campaign adds what a fault can break besides:
//!
//! - **answers outside the contract**: a status other than 200 and 503 for a valid claim (a
//!   500, a 4xx), or a 200 whose body is not a claim answer;
//! - **the ledger itself**, read with SQL rather than through the API (which could hide a
//!   duplicate): every `won` order exactly once, with the user and quantity answered;
//! - **crashes**: a process that died without being killed, other than a clean exit with
//!   status 1 after logging why (a dependency unreachable at start), which a supervisor
//!   restarts and the campaign counts.

use std::collections::HashMap;

use serde::Serialize;

use super::cluster::Cluster;
use crate::bench::{BenchReport, Win};

/// One broken promise.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub what: String,
    pub orders: Vec<String>,
}

/// Every finding of one schedule (empty: clean).
pub async fn verdict(
    report: &BenchReport,
    cluster: &Cluster,
    crashes: Vec<String>,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    match &report.verification {
        None => out.push(finding("the bench did not verify".into())),
        Some(v) => {
            if !v.drained {
                out.push(finding(format!(
                    "the ledger did not settle within the drain timeout ({:.1}s)",
                    v.drain_seconds
                )));
            }
            for x in &v.violations {
                out.push(Finding {
                    what: format!(
                        "invariant {} ({:?}): {}",
                        x.invariant.number(),
                        x.invariant,
                        x.message
                    ),
                    orders: x.orders.clone(),
                });
            }
        }
    }
    for (status, n) in &report.non_2xx {
        if *status != 503 {
            out.push(finding(format!(
                "{n} claims answered HTTP {status}, which the contract does not allow for a valid claim"
            )));
        }
    }
    if report.bad_bodies > 0 {
        out.push(finding(format!(
            "{} claims answered 200 with a body that is not a claim answer",
            report.bad_bodies
        )));
    }
    match ledger_rows(cluster, &report.campaign).await {
        Ok(rows) => out.extend(ledger(&report.wins, &rows)),
        Err(e) => out.push(finding(format!("cannot read the ledger directly: {e:#}"))),
    }
    out.extend(crashes.into_iter().map(finding));
    out
}

fn finding(what: String) -> Finding {
    Finding {
        what,
        orders: vec![],
    }
}

/// One order row as the ledger holds it: (order id, user, qty).
type Row = (String, String, i64);

/// Every `won` is exactly one row of the ledger, with the answered user and quantity.
fn ledger(wins: &[Win], rows: &[Row]) -> Vec<Finding> {
    let mut by_id: HashMap<&str, Vec<&Row>> = HashMap::new();
    for r in rows {
        by_id.entry(r.0.as_str()).or_default().push(r);
    }
    let mut missing = Vec::new();
    let mut twice = Vec::new();
    let mut differ = Vec::new();
    for w in wins {
        match by_id.get(w.order_id.as_str()).map(Vec::as_slice) {
            None | Some([]) => missing.push(w.order_id.clone()),
            Some([r]) => {
                if r.1 != w.user || r.2 as u64 != w.qty {
                    differ.push(w.order_id.clone());
                }
            }
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
    let rows = ledger_rows(cluster, &report.campaign).await?;
    let held: HashMap<&str, &str> = rows.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
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

/// The campaign's orders, read with SQL from the SQLite file or PostgreSQL.
async fn ledger_rows(cluster: &Cluster, campaign: &str) -> anyhow::Result<Vec<Row>> {
    use sqlx::Connection;
    const SQL: &str = "SELECT order_id, user_id, qty FROM orders WHERE campaign_id = ";
    if let Some(file) = &cluster.sqlite {
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(file)
            .read_only(true);
        let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
        let rows = sqlx::query_as::<_, Row>(&format!("{SQL}?"))
            .bind(campaign)
            .fetch_all(&mut c)
            .await?;
        return Ok(rows);
    }
    let url = cluster
        .pg_url
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("the deployment has no ledger"))?;
    let mut c = sqlx::PgConnection::connect(url).await?;
    Ok(sqlx::query_as::<_, Row>(&format!("{SQL}$1"))
        .bind(campaign)
        .fetch_all(&mut c)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(id: &str, user: &str, qty: u64) -> Win {
        Win {
            user: user.into(),
            order_id: id.into(),
            qty,
            codes: None,
            key: None,
        }
    }

    #[test]
    fn every_won_is_one_row_as_answered() {
        let wins = [
            win("c-1", "u1", 1),
            win("c-2", "u2", 2),
            win("c-3", "u3", 1),
        ];
        let rows: Vec<Row> = vec![
            ("c-1".into(), "u1".into(), 1),
            ("c-2".into(), "u2".into(), 1),
            ("c-4".into(), "u4".into(), 1),
        ];
        let f = ledger(&wins, &rows);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[0].orders, vec!["c-3"]);
        assert_eq!(f[1].orders, vec!["c-2"]);
        let rows: Vec<Row> = vec![
            ("c-1".into(), "u1".into(), 1),
            ("c-1".into(), "u1".into(), 1),
        ];
        let f = ledger(&wins[..1], &rows);
        assert_eq!(f[0].orders, vec!["c-1"]);
        assert!(ledger(&wins[..1], &rows[..1]).is_empty());
    }
}
