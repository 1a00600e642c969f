//! What a Redis restored from an older snapshot may take back, and nothing more.
//!
//! A restore ([`super::rewind`]) forgets every decision the gate made after the snapshot. The
//! guarantees that survive it (docs/PROTOCOL.md) are checked as always: no oversell, no code
//! or order number in two live orders, no buyer over the limit, `remaining` level with the
//! ledger, every resolution once. Two answers cannot survive it, and only those are excused:
//!
//! - a `won` answered between the snapshot and the kill, whose order was still in the
//!   stream: lost with it, its order number perhaps issued again to another buyer;
//! - a `won` answered later that the ledger refused because a consumer still alive wrote an
//!   older decision for the same unit first: recorded in `failed_orders`.
//!
//! Answers to one Idempotency-Key differ for the same reason when one of them was given in
//! that window (the remembered answer went back in time with the gate), and a confirm
//! answered 200 in that window may be lost the same way (the gate decided it; the order then
//! expires at its deadline). Everything excused is
//! counted and printed; a schedule without a restore excuses nothing.

use std::collections::HashSet;

use super::cluster::Cluster;
use super::rewind::Window;
use crate::bench::payer::CONFIRMED_BUT_EXPIRED;
use crate::bench::verify::Invariant;
use crate::bench::{BenchReport, Win};

/// How long after the kill an answer the killed Redis decided may still arrive (Redis takes
/// longer than this to start again from the snapshot, so few later answers are excused).
const SLACK: std::time::Duration = std::time::Duration::from_millis(100);

/// The answers a restore may have taken back.
#[derive(Debug, Default)]
pub struct Excused {
    /// Order ids answered `won` inside a window, or answered `won` and in `failed_orders`.
    pub wins: HashSet<String>,
    /// Order ids answered under an Idempotency-Key one answer of which came inside a window.
    pub keyed: HashSet<String>,
    /// Held orders whose confirm was answered 200 inside a window: the `confirmed` the gate
    /// decided may have gone back with it, and the order expired at its deadline instead.
    pub confirms: HashSet<String>,
    /// Of `wins`: answered in a window and not in the ledger as answered.
    pub lost: usize,
    /// Of `wins`: refused by the ledger (`failed_orders`).
    pub refused: usize,
    /// Of `confirms`: not `confirmed` in the ledger.
    pub confirms_lost: usize,
}

impl Excused {
    /// What the `windows` of this schedule's restores excuse (nothing without one).
    pub async fn read(
        report: &BenchReport,
        cluster: &Cluster,
        windows: &[Window],
    ) -> anyhow::Result<Excused> {
        let mut out = Excused::default();
        let Some(first) = windows.iter().map(|w| w.from).min() else {
            return Ok(out);
        };
        // An answer decided just before the kill may reach the bench a little after it.
        let inside =
            |at: std::time::Instant| windows.iter().any(|w| w.from <= at && at <= w.to + SLACK);
        let refused = failed_orders(cluster, &report.campaign).await?;
        let (rows, _) = super::ledger::read(cluster, &report.campaign).await?;
        let held: HashSet<(&str, &str)> = rows
            .iter()
            .map(|r| (r.order_id.as_str(), r.user_id.as_str()))
            .collect();
        for w in &report.wins {
            let kept = held.contains(&(w.order_id.as_str(), w.user.as_str()));
            if inside(w.answered) {
                out.lost += usize::from(!kept);
                out.wins.insert(w.order_id.clone());
            } else if w.answered >= first && refused.contains(&w.order_id) {
                out.refused += usize::from(!kept);
                out.wins.insert(w.order_id.clone());
            }
        }
        let touched: HashSet<(&str, &str)> = report
            .keyed
            .iter()
            .filter(|k| inside(k.answered))
            .map(|k| (k.user.as_str(), k.key.as_str()))
            .collect();
        out.keyed = report
            .keyed
            .iter()
            .filter(|k| touched.contains(&(k.user.as_str(), k.key.as_str())))
            .filter_map(|k| k.order_id.clone())
            .collect();
        out.confirms = report
            .confirmed_at
            .iter()
            .filter(|(_, at)| inside(**at))
            .map(|(id, _)| id.clone())
            .collect();
        out.confirms_lost = rows
            .iter()
            .filter(|r| out.confirms.contains(&r.order_id) && r.state != "confirmed")
            .count();
        Ok(out)
    }

    /// Whether the bench's violation is one a restore explains: a `won`, a keyed answer or a
    /// confirm above, and nothing else.
    pub fn covers(&self, invariant: Invariant, message: &str, orders: &[String]) -> bool {
        let within =
            |set: &dyn Fn(&str) -> bool| !orders.is_empty() && orders.iter().all(|o| set(o));
        match invariant {
            Invariant::WonMissing | Invariant::WonMismatch | Invariant::WonAnsweredTwice => {
                within(&|o| self.wins.contains(o))
            }
            Invariant::IdempotencyBroken => {
                within(&|o| self.wins.contains(o) || self.keyed.contains(o))
            }
            Invariant::HoldBroken if message.ends_with(CONFIRMED_BUT_EXPIRED) => {
                within(&|o| self.confirms.contains(o))
            }
            _ => false,
        }
    }

    /// The confirms answered 200 the ledger is held to: all but the excused.
    pub fn kept_confirms(&self, confirmed: &HashSet<String>) -> HashSet<String> {
        confirmed.difference(&self.confirms).cloned().collect()
    }

    /// The wins the ledger is held to: all but the excused.
    pub fn kept(&self, wins: &[Win]) -> Vec<Win> {
        wins.iter()
            .filter(|w| !self.wins.contains(&w.order_id))
            .cloned()
            .collect()
    }
}

/// Order ids the ledger refused for the campaign (scale-out's `failed_orders`).
async fn failed_orders(cluster: &Cluster, campaign: &str) -> anyhow::Result<HashSet<String>> {
    use sqlx::Connection;
    let Some(url) = cluster.pg_url.as_deref() else {
        return Ok(HashSet::new());
    };
    let mut c = sqlx::PgConnection::connect(url).await?;
    let ids: Vec<(Option<String>,)> =
        sqlx::query_as("SELECT order_id FROM failed_orders WHERE campaign_id = $1")
            .bind(campaign)
            .fetch_all(&mut c)
            .await?;
    Ok(ids.into_iter().filter_map(|(id,)| id).collect())
}
