//! The Idempotency-Key answers the embedded ledger keeps, read with SQL and held to what the
//! bench was told.
//!
//! The bench checks that every retry under one key got the same answer (through the API). A
//! retry after a restart is answered from the `idempotency` table, so that table is where
//! "one answer per key across restarts" lives; here it is read directly after the drain:
//!
//! - every kept answer is one the bench was given under that key (when the bench got any): a
//!   kept answer nobody saw would be replayed to the next retry as something it never was;
//! - every kept `won` names an order of that buyer in the ledger;
//! - every keyed `won` the bench was given is kept (a `won` is kept for a day): a `won`
//!   forgotten would let a retry after a restart buy again.
//!
//! Embedded only: scale-out keeps these answers in Redis (the PostgreSQL table exists so both
//! ledgers accept the same writes, and stays empty).

use std::collections::{HashMap, HashSet};

use super::cluster::Cluster;
use super::finding::Finding;
use super::ledger::Row;
use crate::bench::storm::Keyed;
use crate::domain::Outcome;

/// One kept answer: (user, key) → (outcome, order id).
type Kept = HashMap<(String, String), (String, Option<String>)>;

/// The campaign's kept answers, or None where the ledger is not SQLite.
pub async fn read(cluster: &Cluster, campaign: &str) -> anyhow::Result<Option<Kept>> {
    use sqlx::Connection;
    let Some(file) = &cluster.sqlite else {
        return Ok(None);
    };
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(file)
        .read_only(true);
    let mut c = sqlx::SqliteConnection::connect_with(&opts).await?;
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT user_id, key, answer FROM idempotency WHERE campaign_id = ?")
            .bind(campaign)
            .fetch_all(&mut c)
            .await?;
    let mut out = Kept::with_capacity(rows.len());
    for (user, key, answer) in rows {
        let a: serde_json::Value = serde_json::from_str(&answer)?;
        let outcome = a["outcome"].as_str().unwrap_or_default().to_owned();
        let order = a["order_id"].as_str().map(str::to_owned);
        out.insert((user, key), (outcome, order));
    }
    Ok(Some(out))
}

/// Every finding the kept answers show against the bench's keyed answers and the orders.
pub fn check(kept: &Kept, keyed: &[Keyed], orders: &[Row]) -> Vec<Finding> {
    let mut given: HashMap<(&str, &str), Vec<&Keyed>> = HashMap::new();
    for k in keyed {
        given.entry((&k.user, &k.key)).or_default().push(k);
    }
    let buyer_of: HashMap<&str, &str> = orders
        .iter()
        .map(|r| (r.order_id.as_str(), r.user_id.as_str()))
        .collect();
    let (mut unseen, mut no_order, mut forgotten) = (Vec::new(), Vec::new(), HashSet::new());
    for ((user, key), (outcome, order)) in kept {
        if let Some(answers) = given.get(&(user.as_str(), key.as_str())) {
            let seen = answers
                .iter()
                .any(|a| a.outcome.as_str() == outcome && a.order_id == *order);
            if !seen {
                unseen.push(format!("{user}/{key}: {outcome} {order:?}"));
            }
        }
        if outcome == Outcome::Won.as_str() {
            let id = order.as_deref().unwrap_or_default();
            if buyer_of.get(id) != Some(&user.as_str()) {
                no_order.push(id.to_owned());
            }
        }
    }
    for k in keyed.iter().filter(|k| k.outcome == Outcome::Won) {
        let is_kept = kept
            .get(&(k.user.clone(), k.key.clone()))
            .is_some_and(|(o, id)| o == Outcome::Won.as_str() && *id == k.order_id);
        if !is_kept {
            forgotten.insert(k.order_id.clone().unwrap_or_default());
        }
    }
    let mut out = Vec::new();
    let mut report = |what: String, mut ids: Vec<String>| {
        if !ids.is_empty() {
            ids.sort();
            out.push(Finding {
                what: format!("{} {what}", ids.len()),
                orders: ids,
            });
        }
    };
    report(
        "Idempotency-Key answers kept by the ledger that no claim under the key was given \
         (user/key: kept answer)"
            .into(),
        unseen,
    );
    report(
        "kept `won` answers whose order the ledger does not hold for that buyer".into(),
        no_order,
    );
    report(
        "keyed `won` answers the ledger does not keep (a retry after a restart would buy \
         again)"
            .into(),
        forgotten.into_iter().collect(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(user: &str, key: &str, outcome: Outcome, order: Option<&str>) -> Keyed {
        let now = std::time::Instant::now();
        Keyed {
            user: user.into(),
            key: key.into(),
            outcome,
            order_id: order.map(Into::into),
            sent: now,
            answered: now,
        }
    }

    fn row(id: &str, user: &str) -> Row {
        Row {
            order_id: id.into(),
            user_id: user.into(),
            qty: 1,
            codes: None,
            state: "active".into(),
            pay_by: None,
            resolved_at: None,
        }
    }

    fn kept(entries: &[(&str, &str, &str, Option<&str>)]) -> Kept {
        entries
            .iter()
            .map(|(u, k, o, id)| {
                (
                    (u.to_string(), k.to_string()),
                    (o.to_string(), id.map(str::to_owned)),
                )
            })
            .collect()
    }

    #[test]
    fn kept_answers_match_what_was_told_and_what_was_sold() {
        let answers = vec![
            keyed("a", "k1", Outcome::Won, Some("c-1")),
            keyed("a", "k1", Outcome::Won, Some("c-1")),
            keyed("b", "k1", Outcome::SoldOut, None),
            keyed("c", "k1", Outcome::Won, Some("c-2")),
        ];
        let orders = vec![row("c-1", "a"), row("c-2", "c")];
        let good = kept(&[
            ("a", "k1", "won", Some("c-1")),
            ("b", "k1", "sold_out", None),
            ("c", "k1", "won", Some("c-2")),
        ]);
        assert!(check(&good, &answers, &orders).is_empty());
        // b's kept answer is one b was never given; c's won is forgotten; a's names an order
        // of another buyer.
        let bad = kept(&[
            ("a", "k1", "won", Some("c-2")),
            ("b", "k1", "over_limit", None),
        ]);
        let found: Vec<String> = check(&bad, &answers, &orders)
            .into_iter()
            .map(|f| f.what)
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].contains("no claim under the key was given"),
            "{found:?}"
        );
        assert!(
            found[1].contains("does not hold for that buyer"),
            "{found:?}"
        );
        assert!(found[2].contains("does not keep"), "{found:?}");
    }
}
