//! What a Redis restored from an older snapshot may take back, and nothing more.
//!
//! A restore ([`super::rewind`]) forgets every decision the gate made after the snapshot. The
//! guarantees that survive it (docs/PROTOCOL.md) are checked as always: no oversell, no code
//! or order number in two live orders, no buyer over the limit, `remaining` level with the
//! ledger, every resolution once. What cannot survive it is excused answer by answer, never
//! by order id alone (a restore issues order ids again, so one id may name a lost win and a
//! good one):
//!
//! - a `won` answered inside the window (from the snapshot's fork until the restored Redis
//!   served, widened by faults that could hold an answer back): lost with the stream, its
//!   order number perhaps issued again to another buyer;
//! - a `won` answered after the snapshot that the ledger refused for that very buyer, as a
//!   reissued id or by a ledger rule, in a `failed_orders` row written after the snapshot:
//!   a consumer still alive wrote the older decision for the same id or unit first.
//!
//! A violation of invariant 4 on an order id is excused only when the answers of that id
//! that are not excused are clean on their own. Answers to one Idempotency-Key are checked
//! again without the ones given inside a window (the remembered answer went back in time with
//! the gate); a confirm answered 200 only inside a window may end expired; a `sold_out` sent
//! before a restore proves no under-sell (the restore gave units back). Everything excused is
//! counted and printed; a schedule without a restore excuses nothing.

use std::collections::{HashMap, HashSet};
use std::time::{Instant, SystemTime};

use super::cluster::Cluster;
use super::ledger::Row;
use super::rewind::Window;
use crate::bench::payer::CONFIRMED_BUT_EXPIRED;
use crate::bench::verify::{Invariant, Violation};
use crate::bench::{BenchReport, Win};

/// The answers a restore may have taken back.
#[derive(Debug, Default)]
pub struct Excused {
    /// Every `won` answer of the run and whether it is excused, by order id.
    wins: HashMap<String, Vec<(Win, bool)>>,
    /// The ledger's row of each order id.
    rows: HashMap<String, Row>,
    /// (user, key) whose answers still differ once the answers inside a window are set aside.
    still_broken: HashSet<(String, String)>,
    /// Held orders every confirm-200 of which came inside a window: the `confirmed` the gate
    /// decided may have gone back with it, and the order expired at its deadline instead.
    pub confirms: HashSet<String>,
    /// No qty-1 `sold_out` was sent after the last restore served.
    sold_out_before_restore: bool,
    /// Wins answered inside a window.
    pub in_window: usize,
    /// Of those: not in the ledger as answered.
    pub lost: usize,
    /// Wins answered later that the ledger refused (`failed_orders`) and does not hold.
    pub refused: usize,
    /// Of `confirms`: not `confirmed` in the ledger.
    pub confirms_lost: usize,
    restored: bool,
}

impl Excused {
    /// What the `windows` of this schedule's restores excuse (nothing without one).
    pub async fn read(
        report: &BenchReport,
        cluster: &Cluster,
        windows: &[Window],
    ) -> anyhow::Result<Excused> {
        let mut out = Excused::default();
        let Some(first) = windows.iter().min_by_key(|w| w.from) else {
            return Ok(out);
        };
        out.restored = true;
        let inside = |at: Instant| windows.iter().any(|w| w.contains(at));
        let refused = failed_orders(cluster, &report.campaign, first.from_wall).await?;
        let (rows, _) = super::ledger::read(cluster, &report.campaign).await?;
        for r in rows {
            out.rows.entry(r.order_id.clone()).or_insert(r);
        }
        for w in &report.wins {
            let kept = out
                .rows
                .get(&w.order_id)
                .is_some_and(|r| r.user_id == w.user);
            let excused = if inside(w.answered) {
                out.in_window += 1;
                out.lost += usize::from(!kept);
                true
            } else if w.answered >= first.from
                && refused.contains(&(w.order_id.clone(), w.user.clone()))
            {
                out.refused += usize::from(!kept);
                true
            } else {
                false
            };
            out.wins
                .entry(w.order_id.clone())
                .or_default()
                .push((w.clone(), excused));
        }
        let outside: Vec<_> = report
            .keyed
            .iter()
            .filter(|k| !inside(k.answered))
            .cloned()
            .collect();
        let mut again = Vec::new();
        crate::bench::verify::idempotency(&outside, &mut again);
        out.still_broken = again.into_iter().filter_map(|v| v.key).collect();
        out.confirms = report
            .confirmed_at
            .iter()
            .filter(|(_, (first, last))| inside(*first) && inside(*last))
            .map(|(id, _)| id.clone())
            .collect();
        out.confirms_lost = out
            .confirms
            .iter()
            .filter(|id| out.rows.get(*id).is_none_or(|r| r.state != "confirmed"))
            .count();
        let last_served = windows.iter().map(|w| w.to).max().unwrap_or(first.to);
        out.sold_out_before_restore = report.last_sold_out_sent.is_none_or(|s| s < last_served);
        Ok(out)
    }

    /// Whether the bench's violation is one a restore explains (see the module docs).
    pub fn covers(&self, v: &Violation) -> bool {
        if !self.restored {
            return false;
        }
        let every =
            |f: &dyn Fn(&str) -> bool| !v.orders.is_empty() && v.orders.iter().all(|o| f(o));
        match v.invariant {
            Invariant::WonMissing => every(&|o| self.kept_answers(o).is_empty()),
            Invariant::WonAnsweredTwice => every(&|o| {
                let kept = self.kept_answers(o);
                let claims: HashSet<(&str, Option<&str>)> = kept
                    .iter()
                    .map(|w| (w.user.as_str(), w.key.as_deref()))
                    .collect();
                claims.len() <= 1 && (kept.len() <= 1 || kept[0].key.is_some())
            }),
            // The bench compares the ledger with the id's first answer; excused when every
            // answer still held to the ledger matches its row (and nobody's order was
            // cancelled by no one, which no restore does).
            Invariant::WonMismatch if !v.message.contains("nobody cancelled") => every(&|o| {
                let kept = self.kept_answers(o);
                let row = self.rows.get(o);
                kept.iter().all(|w| {
                    row.is_some_and(|r| {
                        r.user_id == w.user
                            && r.qty as u64 == w.qty
                            && w.codes.as_ref().is_none_or(|c| codes(r) == *c)
                    })
                })
            }),
            Invariant::IdempotencyBroken => v
                .key
                .as_ref()
                .is_some_and(|k| !self.still_broken.contains(k)),
            Invariant::HoldBroken if v.message.ends_with(CONFIRMED_BUT_EXPIRED) => {
                every(&|o| self.confirms.contains(o))
            }
            // A restore gives back the units of the wins it took back: a supply change the
            // bench cannot see. Only a `sold_out` sent after it proves every unit sold.
            Invariant::UnderSold => self.sold_out_before_restore,
            Invariant::HoldBroken if v.orders.is_empty() => self.sold_out_before_restore,
            _ => false,
        }
    }

    /// The answers of order `id` the ledger is held to.
    fn kept_answers(&self, id: &str) -> Vec<&Win> {
        self.wins
            .get(id)
            .map(|ws| ws.iter().filter(|(_, ex)| !ex).map(|(w, _)| w).collect())
            .unwrap_or_default()
    }

    /// The confirms answered 200 the ledger is held to: all but the excused.
    pub fn kept_confirms(&self, confirmed: &HashSet<String>) -> HashSet<String> {
        confirmed.difference(&self.confirms).cloned().collect()
    }

    /// The wins the ledger is held to: all but the excused answers.
    pub fn kept(&self, wins: &[Win]) -> Vec<Win> {
        if !self.restored {
            return wins.to_vec();
        }
        self.wins
            .values()
            .flatten()
            .filter(|(_, ex)| !ex)
            .map(|(w, _)| w.clone())
            .collect()
    }
}

/// A row's codes, as the answer lists them.
fn codes(r: &Row) -> Vec<String> {
    r.codes
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default()
}

/// (order id, buyer) of the wins the ledger refused for the campaign after `since`, as a
/// reissued id or by a ledger rule (scale-out's `failed_orders`; a poison entry or a
/// contradiction is never excused).
async fn failed_orders(
    cluster: &Cluster,
    campaign: &str,
    since: SystemTime,
) -> anyhow::Result<HashSet<(String, String)>> {
    use sqlx::Connection;
    let Some(url) = cluster.pg_url.as_deref() else {
        return Ok(HashSet::new());
    };
    let since = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    let mut c = sqlx::PgConnection::connect(url).await?;
    let rows: Vec<(Option<String>, String, String)> = sqlx::query_as(
        "SELECT order_id, payload, reason FROM failed_orders WHERE campaign_id = $1 AND at >= $2",
    )
    .bind(campaign)
    .bind(since)
    .fetch_all(&mut c)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|(_, _, reason)| {
            reason == crate::pipeline::REISSUED || reason.starts_with(crate::pipeline::LEDGER_RULE)
        })
        .filter_map(|(id, payload, _)| {
            let user = serde_json::from_str::<serde_json::Value>(&payload)
                .ok()?
                .get("user")?
                .as_str()?
                .to_owned();
            Some((id?, user))
        })
        .collect())
}
