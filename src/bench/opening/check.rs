//! The waiting room's promises, checked against what the opening's users were answered and
//! what the ledger holds.
//!
//! Pure, like [`crate::bench::verify`]: the runner hands over every user's record, every claim
//! that had to be refused, and the drained orders, and gets back the violations and the
//! fairness figures the report prints. Nothing here trusts the room's own counts: the rate is
//! recomputed from the `admitted_at` each user was answered, the order from the times the bench
//! itself sent and received its joins.

use std::collections::HashMap;
use std::time::Instant;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::bench::verify::{Invariant, Violation};
use crate::domain::Order;

/// What one simulated user did and was answered.
#[derive(Debug, Clone)]
pub struct Seen {
    pub user: String,
    pub join_sent: Instant,
    pub join_answered: Instant,
    /// The wall-clock time the join was sent, to compare with `starts_at`.
    pub join_sent_at: DateTime<Utc>,
    /// The join was answered `prequeue`.
    pub prequeue: bool,
    pub admitted_at: Option<DateTime<Utc>>,
    /// The room answered `sold_out` before this user was admitted.
    pub room_sold_out: bool,
    /// The claim with the ticket the room gave was refused 403 `not_admitted`.
    pub ticket_refused: bool,
    /// The admission first told, and a different answer read after the claim.
    pub answer_changed: Option<String>,
    /// Placed by its join, yet a later read of its place answered 404: the room forgot it.
    pub forgotten: bool,
}

/// A claim the room had to refuse (no ticket, a forged one, another user's), and its answer.
#[derive(Debug, Clone)]
pub struct Cheat {
    pub user: String,
    pub how: &'static str,
    pub status: u16,
    pub code: String,
}

/// The room as the bench created it.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    pub starts_at: DateTime<Utc>,
    pub admit_per_second: u32,
    pub shuffle: bool,
}

/// How fair and how paced the opening was (the report's "room" section).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Fairness {
    /// Joins answered `prequeue`.
    pub prequeue_users: usize,
    /// Joins sent at or after `starts_at`.
    pub later_users: usize,
    /// Joins sent before `starts_at` but answered with a place: the room may have timed them
    /// on either side of the start, so the order checks leave them out.
    pub straddling_start: usize,
    pub admitted_prequeue: usize,
    pub admitted_later: usize,
    pub sold_out_in_room: usize,
    /// Spearman's rank correlation of the pre-queue's admission order with its join order:
    /// near 0 when the room shuffles.
    pub prequeue_rank_correlation: Option<f64>,
    /// The same for later joiners, whose joins did not overlap: 1 in arrival order.
    pub later_rank_correlation: Option<f64>,
    /// Most admissions in any window of one second.
    pub max_admitted_in_one_second: usize,
    /// Admissions in each whole second after `starts_at`.
    pub admitted_per_second: Vec<usize>,
    /// The first admission, in ms after `starts_at`.
    pub first_admission_ms: Option<i64>,
    pub cheat_claims: usize,
    pub cheat_claims_refused_not_admitted: usize,
}

fn room_violation(message: String, orders: Vec<String>) -> Violation {
    Violation {
        invariant: Invariant::RoomBroken,
        message,
        orders,
        key: None,
    }
}

/// Checks the room's promises; `orders` is the drained ledger of the campaign.
pub fn check(
    room: &Room,
    seen: &[Seen],
    cheats: &[Cheat],
    orders: &[Order],
) -> (Vec<Violation>, Fairness) {
    let mut out = Vec::new();
    let mut f = Fairness {
        cheat_claims: cheats.len(),
        ..Fairness::default()
    };
    for c in cheats {
        if c.status == 403 && c.code == "not_admitted" {
            f.cheat_claims_refused_not_admitted += 1;
        } else if (200..300).contains(&c.status) {
            out.push(room_violation(
                format!(
                    "a claim of {} with {} was processed ({}), not refused 403 not_admitted",
                    c.user, c.how, c.status
                ),
                Vec::new(),
            ));
        }
    }
    for s in seen {
        if s.ticket_refused {
            out.push(room_violation(
                format!(
                    "{}'s claim with the ticket the room gave it was refused",
                    s.user
                ),
                Vec::new(),
            ));
        }
        if s.forgotten {
            out.push(room_violation(
                format!(
                    "{} was placed by its join, then a read of its place answered 404",
                    s.user
                ),
                Vec::new(),
            ));
        }
        if let Some(what) = &s.answer_changed {
            out.push(room_violation(
                format!("{}'s admission changed once told: {what}", s.user),
                Vec::new(),
            ));
        }
    }
    // Every order needs an admission the bench saw, no later than the order.
    let admitted: HashMap<&str, DateTime<Utc>> = seen
        .iter()
        .filter_map(|s| s.admitted_at.map(|a| (s.user.as_str(), a)))
        .collect();
    for o in orders {
        match admitted.get(o.user_id.as_str()) {
            None => out.push(room_violation(
                format!("order {} of {} without an admission", o.order_id, o.user_id),
                vec![o.order_id.clone()],
            )),
            // admitted_at is rounded up to the millisecond.
            Some(a) if o.created_at + TimeDelta::milliseconds(1) < *a => out.push(room_violation(
                format!(
                    "order {} of {} made at {} before its admission at {a}",
                    o.order_id, o.user_id, o.created_at
                ),
                vec![o.order_id.clone()],
            )),
            Some(_) => {}
        }
    }
    let (pre, rest): (Vec<&Seen>, Vec<&Seen>) = seen.iter().partition(|s| s.prequeue);
    let (later, straddling): (Vec<&Seen>, Vec<&Seen>) = rest
        .into_iter()
        .partition(|s| s.join_sent_at >= room.starts_at);
    f.prequeue_users = pre.len();
    f.later_users = later.len();
    f.straddling_start = straddling.len();
    f.sold_out_in_room = seen.iter().filter(|s| s.room_sold_out).count();
    let ms = |a: DateTime<Utc>| (a - room.starts_at).num_milliseconds();
    let mut times: Vec<i64> = seen.iter().filter_map(|s| s.admitted_at.map(ms)).collect();
    times.sort_unstable();
    f.first_admission_ms = times.first().copied();
    if let Some(&first) = times.first().filter(|t| **t < 0) {
        out.push(room_violation(
            format!("a user was admitted {} ms before starts_at", -first),
            Vec::new(),
        ));
    }
    let rate = room.admit_per_second as usize;
    f.max_admitted_in_one_second = max_in_window(&times, 1000);
    if f.max_admitted_in_one_second > rate {
        out.push(room_violation(
            format!(
                "{} admissions within one second, above the rate of {rate}",
                f.max_admitted_in_one_second
            ),
            Vec::new(),
        ));
    }
    for t in times.iter().filter(|t| **t >= 0) {
        let s = (*t / 1000) as usize;
        if f.admitted_per_second.len() <= s {
            f.admitted_per_second.resize(s + 1, 0);
        }
        f.admitted_per_second[s] += 1;
    }
    let last_pre = pre.iter().filter_map(|s| s.admitted_at).max();
    let first_later = later.iter().filter_map(|s| s.admitted_at).min();
    f.admitted_prequeue = pre.iter().filter(|s| s.admitted_at.is_some()).count();
    f.admitted_later = later.iter().filter(|s| s.admitted_at.is_some()).count();
    if let (Some(p), Some(l)) = (last_pre, first_later) {
        if p > l {
            out.push(room_violation(
                format!("a later joiner was admitted at {l}, before a pre-queue user at {p}"),
                Vec::new(),
            ));
        }
    }
    out.extend(arrival_order(&later));
    f.prequeue_rank_correlation = join_correlation(&pre);
    f.later_rank_correlation = join_correlation(&later);
    if let Some(rho) = f.prequeue_rank_correlation.filter(|_| room.shuffle) {
        // Under independence rho has a standard error of 1/sqrt(n-1): five of them is a
        // false alarm about once in 3.5 million runs.
        let bound = (5.0 / ((f.admitted_prequeue as f64) - 1.0).sqrt()).max(0.1);
        if f.admitted_prequeue >= 30 && rho.abs() > bound {
            out.push(room_violation(
                format!(
                    "the pre-queue's admission order follows its join order \
                     (rank correlation {rho:.3}, more than {bound:.3} from 0)"
                ),
                Vec::new(),
            ));
        }
    }
    (out, f)
}

/// Most of the sorted `times` within any half-open window of `width`.
fn max_in_window(times: &[i64], width: i64) -> usize {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= width {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// Later joiners queue in arrival order: when one's join was answered before another's was
/// sent, the first must not be admitted after the second (overlapping joins may go either way).
fn arrival_order(later: &[&Seen]) -> Vec<Violation> {
    let mut by_answer: Vec<(Instant, DateTime<Utc>)> = later
        .iter()
        .filter_map(|s| s.admitted_at.map(|a| (s.join_answered, a)))
        .collect();
    by_answer.sort_unstable_by_key(|(t, _)| *t);
    // The latest admission among the joins answered so far.
    let mut prefix_max = Vec::with_capacity(by_answer.len());
    let mut m: Option<DateTime<Utc>> = None;
    for (_, a) in &by_answer {
        m = Some(m.map_or(*a, |m| m.max(*a)));
        prefix_max.push(m.unwrap_or(*a));
    }
    let mut out = Vec::new();
    for s in later {
        let Some(a) = s.admitted_at else { continue };
        let before = by_answer.partition_point(|(t, _)| *t < s.join_sent);
        if let Some(earlier) = before.checked_sub(1).map(|i| prefix_max[i]) {
            if earlier > a {
                out.push(room_violation(
                    format!(
                        "{} joined after an earlier joiner was answered, yet was admitted at \
                         {a}, before that joiner at {earlier}",
                        s.user
                    ),
                    Vec::new(),
                ));
                if out.len() >= 10 {
                    break;
                }
            }
        }
    }
    out
}

/// Spearman's rho between join order (midpoint of send and answer) and admission time.
fn join_correlation(users: &[&Seen]) -> Option<f64> {
    let base = users.iter().map(|s| s.join_sent).min()?;
    let pairs: Vec<(f64, f64)> = users
        .iter()
        .filter_map(|s| {
            let a = s.admitted_at?;
            let joined = s.join_sent + (s.join_answered - s.join_sent) / 2;
            Some((
                joined.duration_since(base).as_secs_f64(),
                a.timestamp_micros() as f64,
            ))
        })
        .collect();
    if pairs.len() < 3 {
        return None;
    }
    let x = ranks(pairs.iter().map(|p| p.0).collect());
    let y = ranks(pairs.iter().map(|p| p.1).collect());
    pearson(&x, &y)
}

/// Ranks (1-based), ties given their average rank.
fn ranks(v: Vec<f64>) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|a, b| v[*a].total_cmp(&v[*b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for k in &idx[i..=j] {
            r[*k] = avg;
        }
        i = j + 1;
    }
    r
}

fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests;
