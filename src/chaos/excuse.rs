//! What a Redis restored from an older snapshot may take back, and nothing more.
//!
//! A restore ([`super::rewind`]) forgets every decision the gate made after the snapshot. The
//! guarantees that survive it (docs/PROTOCOL.md) are checked as always: no oversell, no code
//! or order number in two live orders, no buyer over the limit, `remaining` level with the
//! ledger, every resolution once. What cannot survive it is excused answer by answer, never
//! by order id alone (a restore issues order ids again, so one id may name a lost win and a
//! good one):
//!
//! - a `won` inside the window (sent before the kill, answered after the snapshot's fork:
//!   [`Window::contains`]): lost with the stream, its order number perhaps issued again to
//!   another buyer;
//! - a `won` answered after the snapshot that the ledger refused for that very buyer, as a
//!   reissued id or by a ledger rule on a new order, in a `failed_orders` row written after
//!   the snapshot and within `REFUSED_WITHIN` of the kill: a consumer still alive wrote the
//!   older decision for the same id or unit first. After a Cluster failover only for a `won`
//!   sent before the kill ([`Window::refused_after`]).
//!
//! A violation of invariant 4 about a `won` is excused only when no answer of that id came
//! before the snapshot (the snapshot knows those: their id cannot be issued again) and the
//! answers that are not excused are clean on their own. Answers to one Idempotency-Key are
//! checked again without the ones inside a window, unless the key was answered before the
//! snapshot (the snapshot remembers that answer, so every later one must repeat it).
//!
//! A confirm answered 200 inside a window may end expired. After a restore (not a Cluster
//! failover), so may a confirm whose 200 returned another order than the one the ledger holds
//! under that number (another buyer, or another `pay_by`), when the ledger refused that very
//! order's `confirmed` as another order (a `failed_orders` row within `REFUSED_WITHIN` of the
//! kill): the restored gate issued the number again, and a confirm names its order by number
//! alone. Such a 200 may come after the ledger order's own `pay_by` too, though never after
//! the returned order's. An order won inside a window may refuse a confirm before its deadline
//! (the restored gate does not know it until the rebuild); and an under-sell is excused only
//! when the last `sold_out` was sent inside a window and a win of it was taken back (the
//! restore gave units back after it).
//!
//! Everything excused is counted and printed; a schedule without a restore excuses nothing.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::ledger::Row;
use super::rewind::Window;
use crate::bench::payer::{Returned, CONFIRMED_BUT_EXPIRED, CONFIRMED_LATE, EXPIRED_EARLY};
use crate::bench::verify::{Invariant, Violation};
use crate::bench::{BenchReport, Win};
use refused::{failed_orders, Contradicted};

/// How long after the kill the ledger may still refuse a win the restore made it disagree
/// with: until the campaign is fenced and rebuilt, which takes the consumers' reclaim bound at
/// most (docs/SCALE_OUT.md); a later refusal is not the restore's.
const REFUSED_WITHIN: Duration = Duration::from_secs(60);

/// The answers a restore may have taken back.
#[derive(Debug, Default)]
pub struct Excused {
    /// Every `won` answer of the run and whether it is excused, by order id.
    wins: HashMap<String, Vec<(Win, bool)>>,
    /// The ledger's row of each order id.
    rows: HashMap<String, Row>,
    /// (user, key) whose answers still differ once the answers inside a window are set aside.
    still_broken: HashSet<(String, String)>,
    /// Held orders whose confirm-200 came inside a window (the `confirmed` the gate decided may
    /// have gone back with it), or returned another order under a reissued number that the
    /// ledger refused (`about_reissued`): the order expired at its deadline instead.
    pub confirms: HashSet<String>,
    /// Order ids and (user, key)s answered before the first snapshot: the snapshot knows them.
    known_ids: HashSet<String>,
    /// The last qty-1 `sold_out` was sent inside a window that took a win back.
    sold_out_in_window: bool,
    /// Wins answered inside a window.
    pub in_window: usize,
    /// Of those: not in the ledger as answered.
    pub lost: usize,
    /// Wins answered later that the ledger refused (`failed_orders`) and does not hold.
    pub refused: usize,
    /// Of the confirms answered inside a window: not `confirmed` in the ledger.
    pub confirms_lost: usize,
    /// Of `confirms`: those answered inside a window.
    pub confirms_in_window: usize,
    /// Of `confirms`: answered 200 with another order under a reissued number than the
    /// ledger's (`about_reissued`).
    pub reissued_confirms: HashSet<String>,
    /// Of `reissued_confirms`: those whose first attempt came before the returned order's own
    /// `pay_by`.
    reissued_on_time: HashSet<String>,
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
        let inside =
            |sent: Instant, answered: Instant| windows.iter().any(|w| w.contains(sent, answered));
        let killed_wall = first.from_wall + (first.killed - first.from);
        let (refused, contradicted) = failed_orders(
            cluster,
            &report.campaign,
            first.from_wall,
            killed_wall + REFUSED_WITHIN,
        )
        .await?;
        let (rows, _) = super::ledger::read(cluster, &report.campaign).await?;
        for r in rows {
            out.rows.entry(r.order_id.clone()).or_insert(r);
        }
        for w in &report.wins {
            let kept = out
                .rows
                .get(&w.order_id)
                .is_some_and(|r| r.user_id == w.user);
            if w.answered < first.from {
                out.known_ids.insert(w.order_id.clone());
            }
            let excused = if inside(w.sent, w.answered) {
                out.in_window += 1;
                out.lost += usize::from(!kept);
                true
            } else if w.answered >= first.from
                && (w.sent <= first.killed || first.refused_after)
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
        let known_keys: HashSet<(&str, &str)> = report
            .keyed
            .iter()
            .filter(|k| k.answered < first.from)
            .map(|k| (k.user.as_str(), k.key.as_str()))
            .collect();
        let outside: Vec<_> = report
            .keyed
            .iter()
            .filter(|k| {
                known_keys.contains(&(k.user.as_str(), k.key.as_str()))
                    || !inside(k.sent, k.answered)
            })
            .cloned()
            .collect();
        let mut again = Vec::new();
        crate::bench::verify::idempotency(&outside, &report.keyed_uncertain, &mut again);
        out.still_broken = again.into_iter().filter_map(|v| v.key).collect();
        // Only a restore keeps a consumer alive that writes the older decision for a number
        // the restored gate issues again (a Cluster failover promises no reissue).
        if windows.iter().any(|w| w.refused_after) {
            out.reissued_confirms = report
                .confirmed_for
                .iter()
                .filter(|(id, returned)| out.about_reissued(id, returned, &contradicted))
                .map(|(id, _)| id.clone())
                .collect();
            out.reissued_on_time = out
                .reissued_confirms
                .iter()
                .filter(|id| report.confirmed_for.get(*id).is_some_and(|r| !r.late))
                .cloned()
                .collect();
        }
        out.confirms = report
            .confirmed_at
            .iter()
            .filter(|(_, (sent, answered))| inside(*sent, *answered))
            .map(|(id, _)| id.clone())
            .collect();
        out.confirms_in_window = out.confirms.len();
        out.confirms_lost = out
            .confirms
            .iter()
            .filter(|id| out.rows.get(*id).is_none_or(|r| r.state != "confirmed"))
            .count();
        out.confirms.extend(out.reissued_confirms.iter().cloned());
        out.sold_out_in_window = out.lost > 0
            && report
                .last_sold_out_sent
                .is_some_and(|s| windows.iter().any(|w| w.from <= s && s <= w.killed));
        Ok(out)
    }

    /// Whether the bench's violation is one a restore explains (see the module docs).
    pub fn covers(&self, v: &Violation) -> bool {
        if !self.restored {
            return false;
        }
        // Never an id the snapshot knew.
        let every = |f: &dyn Fn(&str) -> bool| {
            !v.orders.is_empty() && v.orders.iter().all(|o| !self.known_ids.contains(o) && f(o))
        };
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
            // The order may well be older than the snapshot: its confirm is what went back.
            Invariant::HoldBroken if v.message.ends_with(CONFIRMED_BUT_EXPIRED) => {
                !v.orders.is_empty() && v.orders.iter().all(|o| self.confirms.contains(o))
            }
            // The 200 was about the reissued order, whose own pay_by it kept.
            Invariant::HoldBroken if v.message.contains(CONFIRMED_LATE) => {
                !v.orders.is_empty() && v.orders.iter().all(|o| self.reissued_on_time.contains(o))
            }
            // An order won in the window and kept by the ledger is unknown to the restored
            // gate until the rebuild: a confirm may be refused before its deadline.
            Invariant::HoldBroken if v.message.contains(EXPIRED_EARLY) => every(&|o| {
                self.wins
                    .get(o)
                    .is_some_and(|ws| !ws.is_empty() && ws.iter().all(|(_, ex)| *ex))
            }),
            // A restore gives back the units of the wins it took back: a supply change the
            // bench cannot see. Only a `sold_out` sent after it proves every unit sold.
            Invariant::UnderSold => self.sold_out_in_window,
            Invariant::HoldBroken if v.orders.is_empty() => self.sold_out_in_window,
            _ => false,
        }
    }

    /// Whether a confirm of order number `id` answered 200 with another order (`returned`) than
    /// the one the ledger holds under that number, and the ledger refused that order's
    /// `confirmed` as another order (`contradicted`): the restored gate issued the number
    /// again. A confirm names its order by number alone; this 200 was about the order the
    /// ledger refused, while the ledger's order under the number expires unpaid.
    fn about_reissued(
        &self,
        id: &str,
        returned: &Returned,
        contradicted: &HashSet<Contradicted>,
    ) -> bool {
        !self.known_ids.contains(id)
            && self
                .rows
                .get(id)
                .is_some_and(|r| r.user_id != returned.user || r.pay_by != returned.pay_by)
            && contradicted.contains(&(id.to_owned(), returned.user.clone(), returned.pay_by))
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

mod refused;
#[cfg(test)]
mod tests;

/// A row's codes, as the answer lists them.
fn codes(r: &Row) -> Vec<String> {
    r.codes
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default()
}
