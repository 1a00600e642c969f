//! Invariant 6 over the keyed answers: one answer per (user, Idempotency-Key), within what
//! the server's caps on kept rejections let it remember.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::{violation, Invariant, Violation};
use crate::bench::storm::Keyed;
use crate::domain::Outcome;

/// Answers of keyed claims that changed nothing the server keeps per user and per campaign by
/// default: beyond either, a rejected claim is answered but not remembered, and its retry is
/// decided afresh.
pub(super) const KEPT_REJECTIONS_PER_USER: usize = crate::config::KEPT_REJECTIONS_PER_USER as usize;
pub(super) const KEPT_REJECTIONS_PER_CAMPAIGN: usize =
    crate::config::KEPT_REJECTIONS_PER_CAMPAIGN as usize;

/// Invariant 6: all answers to one (user, Idempotency-Key) are the same, so at most one order.
/// A `won` answer is kept for a day, so no answer to a retry sent after it arrived may differ,
/// and no key may win two orders. Answers that changed nothing are kept only within the
/// server's caps (docs/API.md), so beyond a cap a rejection's retry is decided afresh and may
/// win; any two different answers under one key count only when the server cannot have
/// reached a cap when it decided the key's first rejection: fewer of the user's keys than the
/// per-user cap, and fewer of the campaign's than the per-campaign cap, had a first rejection
/// sent before that one's answer arrived (an upper bound on what the server had kept by then:
/// a claim of `uncertain`, without a claim answer, counts as a rejection sent then — a 503
/// that changed nothing still held a place under the cap while its commit was tried;
/// checked against the server's defaults, so a server run with lower caps can show more).
pub fn idempotency(
    keyed: &[Keyed],
    uncertain: &[(String, String, Instant)],
    out: &mut Vec<Violation>,
) {
    let mut by_key: BTreeMap<(&str, &str), Vec<&Keyed>> = BTreeMap::new();
    for k in keyed {
        by_key.entry((&k.user, &k.key)).or_default().push(k);
    }
    // Each key's first rejection, as (sent, answered); the sends per user and in all, sorted.
    let first_rejection = |answers: &[&Keyed]| {
        answers
            .iter()
            .filter(|a| a.outcome != Outcome::Won)
            .map(|a| (a.sent, a.answered))
            .min()
    };
    // When each key may first have been rejected.
    let mut first_sent: HashMap<(&str, &str), Instant> = HashMap::new();
    for (key, answers) in &by_key {
        if let Some((sent, _)) = first_rejection(answers) {
            first_sent.insert(*key, sent);
        }
    }
    for (user, key, sent) in uncertain {
        let at = first_sent.entry((user, key)).or_insert(*sent);
        *at = (*at).min(*sent);
    }
    let mut sends_of: HashMap<&str, Vec<Instant>> = HashMap::new();
    let mut sends: Vec<Instant> = Vec::with_capacity(first_sent.len());
    for ((user, _), sent) in first_sent {
        sends_of.entry(user).or_default().push(sent);
        sends.push(sent);
    }
    sends.sort_unstable();
    sends_of.values_mut().for_each(|v| v.sort_unstable());
    // Keys (this one included) whose first rejection was sent before `at`.
    let before = |sorted: &[Instant], at: Instant| sorted.partition_point(|s| *s < at);
    for ((user, key), answers) in by_key {
        let distinct: HashSet<(&str, Option<&str>)> = answers
            .iter()
            .map(|a| (a.outcome.as_str(), a.order_id.as_deref()))
            .collect();
        let capped = first_rejection(&answers).is_some_and(|(_, answered)| {
            before(sends_of.get(user).map_or(&[][..], Vec::as_slice), answered)
                > KEPT_REJECTIONS_PER_USER
                || before(&sends, answered) > KEPT_REJECTIONS_PER_CAMPAIGN
        });
        let won: Vec<&&Keyed> = answers
            .iter()
            .filter(|a| a.outcome == Outcome::Won)
            .collect();
        let two_orders = won.iter().any(|w| w.order_id != won[0].order_id);
        // A retry sent once a `won` had arrived must replay it.
        let after_won = won.iter().any(|w| {
            answers
                .iter()
                .any(|a| a.sent > w.answered && a.order_id != w.order_id)
        });
        if distinct.len() > 1 && (two_orders || after_won || !capped) {
            let mut orders: Vec<String> =
                answers.iter().filter_map(|a| a.order_id.clone()).collect();
            orders.sort();
            orders.dedup();
            let mut seen: Vec<String> = distinct
                .iter()
                .map(|(o, id)| match id {
                    Some(id) => format!("{o} {id}"),
                    None => o.to_string(),
                })
                .collect();
            seen.sort();
            out.push(Violation {
                key: Some((user.to_owned(), key.to_owned())),
                ..violation(
                    Invariant::IdempotencyBroken,
                    format!(
                        "user {user} retried key {key:?} and got different answers: {}",
                        seen.join(" / ")
                    ),
                    orders,
                )
            });
        }
    }
}
