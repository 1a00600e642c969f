use super::idempotency::KEPT_REJECTIONS_PER_USER;
use super::*;
use crate::domain::Outcome;

/// One answer, sent and answered after every answer made before it.
fn keyed(user: &str, key: &str, outcome: Outcome, order: Option<&str>) -> Keyed {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(Instant::now);
    let n = NEXT.fetch_add(2, Ordering::Relaxed);
    Keyed {
        user: user.into(),
        key: key.into(),
        outcome,
        order_id: order.map(Into::into),
        sent: base + Duration::from_micros(n),
        answered: base + Duration::from_micros(n + 1),
    }
}

/// Users flagged by invariant 6 (the user is the message's second word).
fn flagged(keyed: &[Keyed]) -> Vec<String> {
    let mut out = Vec::new();
    idempotency(keyed, &[], &mut out);
    out.iter()
        .map(|v| v.message.split(' ').nth(1).unwrap().to_owned())
        .collect()
}

#[test]
fn differing_rejections_count_only_below_the_servers_caps() {
    let mut keyed = vec![
        keyed("few", "k0", Outcome::OverLimit, None),
        keyed("few", "k0", Outcome::SoldOut, None),
        keyed("won", "k0", Outcome::Won, Some("c-1")),
        keyed("won", "k0", Outcome::SoldOut, None),
    ];
    // Users past the per-user cap: their rejections need not be remembered; a won still is.
    for user in ["many", "won"] {
        for i in 1..=KEPT_REJECTIONS_PER_USER {
            keyed.push(self::keyed(user, &format!("k{i}"), Outcome::SoldOut, None));
        }
    }
    // Past the cap when its first rejection was decided: not remembered, decided afresh.
    let past = format!("k{}", KEPT_REJECTIONS_PER_USER + 1);
    keyed.push(self::keyed("many", &past, Outcome::SoldOut, None));
    keyed.push(self::keyed("many", &past, Outcome::OverLimit, None));
    assert_eq!(flagged(&keyed), ["few", "won"]);
}

#[test]
fn a_rejection_kept_below_the_cap_stays_kept_when_the_user_passes_the_cap_later() {
    let mut keyed = vec![self::keyed("early", "k0", Outcome::SoldOut, None)];
    for i in 1..=KEPT_REJECTIONS_PER_USER {
        keyed.push(self::keyed(
            "early",
            &format!("k{i}"),
            Outcome::SoldOut,
            None,
        ));
    }
    // k0 was the user's first rejected key, so the server kept it: its retry must replay it,
    // although by the end of the run the user has more rejected keys than the cap.
    keyed.push(self::keyed("early", "k0", Outcome::Won, Some("c-1")));
    assert_eq!(flagged(&keyed), ["early"]);
}

#[test]
fn beyond_a_cap_a_rejection_may_be_followed_by_a_win_but_never_the_reverse() {
    let mut keyed = Vec::new();
    for user in ["first-rejected", "first-won", "two-orders"] {
        for i in 1..=KEPT_REJECTIONS_PER_USER {
            keyed.push(self::keyed(user, &format!("k{i}"), Outcome::SoldOut, None));
        }
    }
    // Rejected (not kept, the user is past the cap), then won on the retry: allowed.
    keyed.push(self::keyed("first-rejected", "k0", Outcome::SoldOut, None));
    keyed.push(self::keyed(
        "first-rejected",
        "k0",
        Outcome::Won,
        Some("c-1"),
    ));
    // Won, then a retry sent after the win arrived answered otherwise: a violation.
    keyed.push(self::keyed("first-won", "k0", Outcome::Won, Some("c-2")));
    keyed.push(self::keyed("first-won", "k0", Outcome::SoldOut, None));
    // One key, two orders: a violation whatever the order.
    keyed.push(self::keyed("two-orders", "k0", Outcome::Won, Some("c-3")));
    keyed.push(self::keyed("two-orders", "k0", Outcome::Won, Some("c-4")));
    assert_eq!(flagged(&keyed), ["first-won", "two-orders"]);
}

#[test]
fn unanswered_keyed_claims_count_toward_the_caps() {
    // 64 keyed claims of one user went unanswered (each may have been a kept rejection),
    // then a rejection the server need not keep and a win on its retry: not flagged.
    let keyed = vec![
        keyed("u", "k0", Outcome::SoldOut, None),
        keyed("u", "k0", Outcome::Won, Some("c-1")),
    ];
    let before = keyed[0].sent - std::time::Duration::from_millis(1);
    let uncertain: Vec<(String, String, std::time::Instant)> = (1..=KEPT_REJECTIONS_PER_USER)
        .map(|i| ("u".to_owned(), format!("lost{i}"), before))
        .collect();
    let mut out = Vec::new();
    idempotency(&keyed, &uncertain, &mut out);
    assert!(out.is_empty(), "{out:?}");
    idempotency(&keyed, &[], &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
}
