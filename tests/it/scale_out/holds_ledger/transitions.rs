//! Transitions applied once, in stream order, out of order after a reclaim; contradictions
//! recorded.

use std::time::Duration;

use seckill::domain::OrderState;
use seckill::engine::scale_out::{Keys, GROUP};
use seckill::ledger::Ledger;

use super::{drain, new_order, transition, us, Rig, HOLD_US, WON};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transitions_apply_once_in_stream_order_and_contradictions_are_recorded() {
    let mut rig = Rig::start("held", 100, &[]).await;
    let mut c = rig.consumer("one", 1000, Duration::from_secs(30)).await;
    let orders: Vec<_> = (1..=4)
        .map(|i| new_order("held", i, &format!("u{i}"), &[]))
        .collect();
    for o in &orders {
        rig.xadd("held", o).await;
    }
    // Its new order and its confirm in one batch: the insert goes first.
    let confirm_1 = transition("confirmed", WON + 10, &orders[0]);
    rig.xadd("held", &confirm_1).await;
    let step = c.step().await.unwrap();
    assert_eq!((step.read, step.persisted, step.poisoned), (5, 5, 0));
    let one = rig.order("held-1").await;
    assert_eq!(one.state, OrderState::Confirmed);
    assert_eq!(
        (one.pay_by, one.resolved_at),
        (us(WON + 1 + HOLD_US), us(WON + 10))
    );
    for i in 2..=4 {
        let o = rig.order(&format!("held-{i}")).await;
        assert_eq!(
            (o.state, o.pay_by),
            (OrderState::Pending, us(WON + i + HOLD_US))
        );
        assert_eq!((o.resolved_at, o.cancelled_at), (None, None));
    }

    // An expiry and a cancel, each delivered twice, and the confirm again.
    let expire_2 = transition("expired", WON + 20, &orders[1]);
    let cancel_3 = transition("cancelled", WON + 30, &orders[2]);
    for t in [&expire_2, &cancel_3, &confirm_1, &expire_2, &cancel_3] {
        rig.xadd("held", t).await;
    }
    let step = drain(&mut c).await;
    assert_eq!((step.read, step.persisted, step.poisoned), (5, 5, 0));
    let two = rig.order("held-2").await;
    assert_eq!(
        (two.state, two.resolved_at),
        (OrderState::Expired, us(WON + 20))
    );
    let three = rig.order("held-3").await;
    assert_eq!(three.state, OrderState::Cancelled);
    assert_eq!(
        (three.cancelled_at, three.resolved_at),
        (us(WON + 30), None)
    );
    assert_eq!(
        rig.order("held-1").await,
        one,
        "the repeated confirm changed nothing"
    );
    assert_eq!(
        rig.resolutions("held-1").await,
        [("confirmed".into(), WON + 10)]
    );
    assert_eq!(
        rig.resolutions("held-2").await,
        [("expired".into(), WON + 20)]
    );
    assert_eq!(
        rig.resolutions("held-3").await,
        [("cancel".into(), WON + 30)]
    );

    // Expired after confirmed: recorded with both states, acknowledged, the row unchanged.
    rig.xadd("held", &transition("expired", WON + 40, &orders[0]))
        .await;
    let step = drain(&mut c).await;
    assert_eq!((step.read, step.persisted, step.poisoned), (1, 0, 1));
    assert_eq!(rig.order("held-1").await, one);
    let failed = rig.ledger.failed_orders("held").await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0.as_deref(), Some("held-1"));
    assert!(
        failed[0].1.contains("is confirmed in the ledger")
            && failed[0].1.contains("became expired"),
        "{}",
        failed[0].1
    );
    let len: u64 = redis::cmd("XLEN")
        .arg(Keys::new("held").orders())
        .query_async(&mut rig.raw)
        .await
        .unwrap();
    assert_eq!(len, 0, "every entry acknowledged and removed");

    // Reads: state, pay_by and resolved_at in the listing too.
    let listed = rig.ledger.orders("held", None, 0, 10).await.unwrap();
    let states: Vec<_> = listed.iter().map(|o| o.state).collect();
    use OrderState::*;
    assert_eq!(states, [Confirmed, Expired, Cancelled, Pending]);
    assert_eq!(listed[1], two);

    // An admin cancel takes active and confirmed orders, never a pending one (Redis decides those).
    let at = seckill::domain::now();
    assert!(rig
        .ledger
        .cancel_order("held-4", at)
        .await
        .unwrap()
        .is_none());
    let cancelled = rig
        .ledger
        .cancel_order("held-1", at)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (cancelled.state, cancelled.resolved_at),
        (Cancelled, us(WON + 10))
    );
    // The confirm redelivered after that cancel is a redelivery, not a contradiction.
    rig.xadd("held", &confirm_1).await;
    assert_eq!(drain(&mut c).await.poisoned, 0);
    assert_eq!(rig.ledger.failed_orders("held").await.unwrap().len(), 1);
    assert_eq!(rig.order("held-1").await.state, Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transition_reclaimed_before_its_order_inserts_the_final_state() {
    let mut rig = Rig::start("late", 10, &["A", "B", "C"]).await;
    let first = new_order("late", 1, "ann", &["A"]);
    rig.xadd("late", &first).await;
    // A consumer reads the new order and stalls before writing it.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("stalled")
        .arg("COUNT")
        .arg(10)
        .arg("STREAMS")
        .arg(Keys::new("late").orders())
        .arg(">")
        .query_async(&mut rig.raw)
        .await
        .unwrap();
    rig.xadd("late", &transition("expired", WON + 99, &first))
        .await;
    let mut c = rig.consumer("live", 1000, Duration::from_millis(200)).await;
    let step = c.step().await.unwrap();
    assert_eq!(
        (step.read, step.persisted),
        (1, 1),
        "only the transition was new"
    );
    let expired = rig.order("late-1").await;
    assert_eq!(expired.state, OrderState::Expired);
    assert_eq!(expired.codes, Some(vec!["A".to_string()]));
    assert_eq!(
        (expired.pay_by, expired.resolved_at),
        (us(WON + 1 + HOLD_US), us(WON + 99))
    );
    assert_eq!(expired.created_at, us(WON + 1).unwrap());

    // The stalled consumer's new-order entry is taken over and applied after: nothing changes.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let step = drain(&mut c).await;
    assert_eq!((step.read, step.persisted, step.poisoned), (1, 1, 0));
    assert_eq!(rig.order("late-1").await, expired);
    assert!(rig.ledger.failed_orders("late").await.unwrap().is_empty());
    let fenced: Option<String> = redis::cmd("HGET")
        .arg(Keys::new("late").meta())
        .arg("fenced")
        .query_async(&mut rig.raw)
        .await
        .unwrap();
    assert_eq!(fenced, None, "a redelivered order is not a reissued id");

    // Out of order inside one batch: the cancel, then its new order.
    let second = new_order("late", 2, "bob", &["B"]);
    rig.xadd("late", &transition("cancelled", WON + 77, &second))
        .await;
    rig.xadd("late", &second).await;
    assert_eq!(drain(&mut c).await.persisted, 2);
    let two = rig.order("late-2").await;
    assert_eq!(
        (two.state, two.cancelled_at),
        (OrderState::Cancelled, us(WON + 77))
    );
    assert_eq!(
        rig.resolutions("late-1").await,
        [("expired".into(), WON + 99)]
    );
    assert_eq!(
        rig.resolutions("late-2").await,
        [("cancel".into(), WON + 77)]
    );
}
