//! The atomic step's rules on small cases.

use super::*;

fn stock(total: u64, limit: u64) -> CampaignState {
    let def = CampaignDef {
        id: "air-12".into(),
        kind: Kind::Stock,
        per_user_limit: limit,
        starts_at: None,
        ends_at: None,
        hold_seconds: None,
        waiting_room: None,
    };
    CampaignState::new(def, total, vec![], Status::Active)
}

fn outcome(d: &Decision) -> Outcome {
    match d {
        Decision::Rejected(a) => a.outcome,
        Decision::Won(_) => Outcome::Won,
        Decision::Dormant => panic!("a loaded campaign is never dormant"),
    }
}

/// The transcript of seed 002: stock 5, limit 2.
#[test]
fn seed_002_transcript() {
    let mut s = stock(5, 2);
    let now = Utc::now();
    assert_eq!(outcome(&s.decide("u101", 2, now)), Outcome::Won);
    assert_eq!(outcome(&s.decide("u101", 2, now)), Outcome::AlreadyClaimed);
    assert_eq!(outcome(&s.decide("u102", 2, now)), Outcome::Won);
    assert_eq!(outcome(&s.decide("u103", 3, now)), Outcome::OverLimit);
    assert_eq!(outcome(&s.decide("u103", 2, now)), Outcome::SoldOut);
    assert_eq!(s.remaining, 1);
}

#[test]
fn release_restores_everything() {
    let def = CampaignDef {
        id: "p".into(),
        kind: Kind::Codes,
        per_user_limit: 1,
        starts_at: None,
        ends_at: None,
        hold_seconds: None,
        waiting_room: None,
    };
    let mut s = CampaignState::new(def, 2, vec!["A".into(), "B".into()], Status::Active);
    let Decision::Won(r) = s.decide("u1", 1, Utc::now()) else {
        panic!("should win")
    };
    assert_eq!(r.codes, vec!["A".to_string()]);
    s.release(&r.user_id, r.qty, &r.codes);
    assert_eq!(s.remaining, 2);
    assert_eq!(s.held_by("u1"), 0);
    let Decision::Won(again) = s.decide("u1", 1, Utc::now()) else {
        panic!("should win again")
    };
    assert_eq!(again.codes, vec!["A".to_string()]);
    assert_ne!(again.order_id, r.order_id);
}

/// A won order of a campaign with holds is pending until its deadline; expiring it gives
/// its code and the user's allowance back, and a failed commit of a claim a resolution
/// already took is left to that resolution.
#[test]
fn holds_pend_until_the_deadline_and_expiry_returns_everything() {
    let def = CampaignDef {
        id: "h".into(),
        kind: Kind::Codes,
        per_user_limit: 1,
        starts_at: None,
        ends_at: None,
        hold_seconds: Some(60),
        waiting_room: None,
    };
    let mut s = CampaignState::new(def, 2, vec!["A".into(), "B".into()], Status::Active);
    let now = Utc::now();
    let Decision::Won(r) = s.decide("u1", 1, now) else {
        panic!("should win")
    };
    let answer = r.answer(Kind::Codes);
    assert_eq!(answer.state, Some(OrderState::Pending));
    assert_eq!(answer.pay_by, Some(now + chrono::TimeDelta::seconds(60)));
    assert_eq!(s.view().holds.map(|h| h.pending), Some(1));
    assert_eq!(s.view().remaining, 1);
    assert!(s
        .holds
        .take_due(now + chrono::TimeDelta::seconds(59), 10)
        .is_empty());
    let due = s.holds.take_due(now + chrono::TimeDelta::seconds(60), 10);
    assert_eq!(due.len(), 1);
    s.undo(&r); // the claim's commit "failed" after the expiry took it: left alone
    assert_eq!(s.remaining, 1);
    let (_, held) = &due[0];
    s.holds.settled(held.qty);
    s.release(&held.user_id, held.qty, &held.codes);
    assert_eq!((s.remaining, s.held_by("u1")), (2, 0));
    assert_eq!(s.view().holds.map(|h| h.pending), Some(0));
    let Decision::Won(again) = s.decide("u2", 1, now) else {
        panic!("the returned code sells again")
    };
    assert_eq!(again.codes, vec!["A".to_string()]);
}
