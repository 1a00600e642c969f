use std::time::Duration;

use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::*;
use crate::domain::OrderState;

const RATE: u32 = 100;

fn room(starts_at: DateTime<Utc>) -> Room {
    Room {
        starts_at,
        admit_per_second: RATE,
        shuffle: true,
    }
}

/// 200 pre-queue users admitted in a shuffled order, then 50 later joiners in arrival order,
/// one every 1/RATE s from the start.
fn fair() -> (Room, Vec<Seen>) {
    let t0 = Instant::now();
    let starts = Utc::now();
    let mut slots: Vec<i64> = (0..200).collect();
    slots.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7));
    let spacing = 1000 / RATE as i64;
    let mut seen = Vec::new();
    for (i, slot) in slots.into_iter().enumerate() {
        let sent = t0 + Duration::from_millis(i as u64);
        seen.push(Seen {
            user: format!("p{i}"),
            join_sent: sent,
            join_answered: sent + Duration::from_micros(300),
            join_sent_at: starts - TimeDelta::seconds(5),
            prequeue: true,
            admitted_at: Some(starts + TimeDelta::milliseconds(slot * spacing)),
            room_sold_out: false,
            ticket_refused: false,
            answer_changed: None,
            forgotten: false,
        });
    }
    for i in 0..50 {
        let sent = t0 + Duration::from_secs(10) + Duration::from_millis(i);
        seen.push(Seen {
            user: format!("l{i}"),
            join_sent: sent,
            join_answered: sent + Duration::from_micros(300),
            join_sent_at: starts + TimeDelta::milliseconds(i as i64),
            prequeue: false,
            admitted_at: Some(starts + TimeDelta::milliseconds((200 + i as i64) * spacing)),
            room_sold_out: false,
            ticket_refused: false,
            answer_changed: None,
            forgotten: false,
        });
    }
    (room(starts), seen)
}

fn order(user: &str, at: DateTime<Utc>) -> Order {
    Order {
        order_id: format!("c-{user}"),
        campaign_id: "c".into(),
        user_id: user.into(),
        qty: 1,
        codes: None,
        state: OrderState::Active,
        created_at: at,
        cancelled_at: None,
        pay_by: None,
        resolved_at: None,
    }
}

fn messages(v: &[Violation]) -> String {
    v.iter()
        .map(|v| v.message.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn a_fair_opening_passes_with_its_figures() {
    let (room, seen) = fair();
    let orders: Vec<Order> = seen
        .iter()
        .map(|s| order(&s.user, s.admitted_at.unwrap() + TimeDelta::milliseconds(3)))
        .collect();
    let cheats = vec![Cheat {
        user: "p1".into(),
        how: "no ticket",
        status: 403,
        code: "not_admitted".into(),
    }];
    let (v, f) = check(&room, &seen, &cheats, &orders);
    assert!(v.is_empty(), "{}", messages(&v));
    assert_eq!((f.prequeue_users, f.later_users), (200, 50));
    assert_eq!(f.max_admitted_in_one_second, RATE as usize);
    assert_eq!(f.admitted_per_second, vec![100, 100, 50]);
    assert_eq!(f.first_admission_ms, Some(0));
    assert!(f.prequeue_rank_correlation.unwrap().abs() < 0.2);
    assert!((f.later_rank_correlation.unwrap() - 1.0).abs() < 1e-9);
    assert_eq!(f.cheat_claims_refused_not_admitted, 1);
}

#[test]
fn every_broken_promise_is_named() {
    let (room, mut seen) = fair();
    // Admitted before the start.
    seen[0].admitted_at = Some(room.starts_at - TimeDelta::milliseconds(5));
    // A later joiner admitted before the pre-queue is through, 101 in the first second.
    seen[200].admitted_at = Some(room.starts_at + TimeDelta::milliseconds(500));
    seen[5].ticket_refused = true;
    seen[6].answer_changed = Some("admitted at 1, then admitted at 2".into());
    seen[7].forgotten = true;
    // A later joiner admitted ahead of earlier joiners.
    seen[240].admitted_at = Some(room.starts_at + TimeDelta::milliseconds(1995));
    let orders = vec![
        order("nobody", room.starts_at),
        order(
            "p3",
            seen[3].admitted_at.unwrap() - TimeDelta::milliseconds(50),
        ),
    ];
    let cheats = vec![Cheat {
        user: "p2".into(),
        how: "a forged ticket",
        status: 200,
        code: String::new(),
    }];
    let (v, _) = check(&room, &seen, &cheats, &orders);
    let all = messages(&v);
    for part in [
        "with a forged ticket was processed",
        "order c-nobody of nobody without an admission",
        "before its admission",
        "ms before starts_at",
        "above the rate of 100",
        "before a pre-queue user",
        "joined after an earlier joiner was answered",
        "p5's claim with the ticket the room gave it was refused",
        "p6's admission changed once told",
        "p7 was placed by its join, then a read of its place answered 404",
    ] {
        assert!(all.contains(part), "{part:?} missing from: {all}");
    }
    assert!(v.iter().all(|v| v.invariant == Invariant::RoomBroken));
}

#[test]
fn a_pre_queue_admitted_in_join_order_is_not_shuffled() {
    let (room, mut seen) = fair();
    for (i, s) in seen.iter_mut().take(200).enumerate() {
        s.admitted_at = Some(room.starts_at + TimeDelta::milliseconds(i as i64 * 10));
    }
    let (v, f) = check(&room, &seen, &[], &[]);
    assert!((f.prequeue_rank_correlation.unwrap() - 1.0).abs() < 1e-9);
    assert!(messages(&v).contains("follows its join order"), "{v:?}");
    let unshuffled = Room {
        shuffle: false,
        ..room
    };
    assert!(check(&unshuffled, &seen, &[], &[]).0.is_empty());
}

#[test]
fn windows_and_ranks() {
    assert_eq!(max_in_window(&[0, 999, 1000, 1001, 1999], 1000), 3);
    assert_eq!(max_in_window(&[], 1000), 0);
    assert_eq!(ranks(vec![3.0, 1.0, 3.0, 2.0]), vec![3.5, 1.0, 3.5, 2.0]);
    let up = [1.0, 2.0, 3.0];
    assert!((pearson(&up, &[3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
    assert_eq!(pearson(&up, &[1.0, 1.0, 1.0]), None);
}
