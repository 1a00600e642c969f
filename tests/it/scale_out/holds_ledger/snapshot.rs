//! The gate's rebuild snapshot and the ledger's recovery with pending orders.

use std::time::Duration;

use seckill::domain::{OrderState, Status};
use seckill::ledger::{Ledger, LedgerWrite};

use super::{drain, new_order, transition, us, Rig, HOLD_US, WON};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshot_and_recovery_rebuild_pending_orders_with_their_deadlines() {
    let mut rig = Rig::start("snap", 5, &["C1", "C2", "C3", "C4", "C5"]).await;
    let users = ["u1", "u2", "u3", "u4", "u5"];
    let orders: Vec<_> = (1..=5)
        .map(|i| {
            new_order(
                "snap",
                i,
                users[i as usize - 1],
                &[["C1", "C2", "C3", "C4", "C5"][i as usize - 1]],
            )
        })
        .collect();
    for o in &orders {
        rig.xadd("snap", o).await;
    }
    rig.xadd("snap", &transition("confirmed", WON + 10, &orders[1]))
        .await;
    rig.xadd("snap", &transition("expired", WON + 20, &orders[2]))
        .await;
    rig.xadd("snap", &transition("cancelled", WON + 30, &orders[3]))
        .await;
    let mut c = rig.consumer("one", 1000, Duration::from_secs(30)).await;
    assert_eq!(drain(&mut c).await.persisted, 8);

    let (snap, mut released) = rig.ledger.stored_snapshot("snap").await.unwrap().unwrap();
    released.sort();
    assert_eq!(snap.def.hold_seconds, Some(60));
    assert_eq!(
        snap.active,
        [("u2".to_string(), 1, vec!["C2".to_string()])],
        "confirmed is live"
    );
    let pending: Vec<_> = snap
        .pending
        .iter()
        .map(|p| (p.seq, p.user_id.as_str(), p.pay_by))
        .collect();
    assert_eq!(
        pending,
        [
            (1, "u1", us(WON + 1 + HOLD_US).unwrap()),
            (5, "u5", us(WON + 5 + HOLD_US).unwrap())
        ]
    );
    assert_eq!(
        released,
        ["snap-3", "snap-4"],
        "expired and cancelled units went back"
    );
    assert_eq!(snap.max_seq, 5);

    let mut state = seckill::engine::scale_out::gate_state(&snap);
    assert_eq!(state.remaining, 2, "pending and confirmed units are taken");
    assert_eq!(state.pool().cloned().collect::<Vec<_>>(), ["C3", "C4"]);
    assert_eq!(
        (
            state.held_by("u1"),
            state.held_by("u2"),
            state.held_by("u3")
        ),
        (1, 1, 0)
    );
    assert_eq!(state.holds.next_deadline(), us(WON + 1 + HOLD_US));
    let due = state.holds.take_due(us(WON + 5 + HOLD_US).unwrap(), 10);
    let due: Vec<_> = due
        .iter()
        .map(|(seq, h)| (*seq, h.codes.clone(), h.pay_by))
        .collect();
    assert_eq!(
        due,
        [
            (1, vec!["C1".to_string()], us(WON + 1 + HOLD_US).unwrap()),
            (5, vec!["C5".to_string()], us(WON + 5 + HOLD_US).unwrap())
        ]
    );
    assert_eq!(state.view().holds.map(|h| h.hold_seconds), Some(60));

    // The whole-ledger recovery streams the same, pending orders with their seq and deadline.
    #[derive(Default)]
    struct Seen {
        live: Vec<String>,
        pending: Vec<(u64, String, i64)>,
    }
    impl seckill::ledger::Recovery for Seen {
        fn campaign(
            &mut self,
            c: seckill::ledger::StoredCampaign,
        ) -> anyhow::Result<seckill::ledger::Wanted> {
            assert_eq!(
                (c.def.hold_seconds, c.status, c.max_seq, c.pending),
                (Some(60), Status::Active, 5, true)
            );
            Ok(seckill::ledger::Wanted::Everything)
        }
        fn code(&mut self, _: &str, _: String) -> anyhow::Result<()> {
            Ok(())
        }
        fn order(&mut self, _: &str, user: &str, _: u64, _: &[String]) -> anyhow::Result<()> {
            self.live.push(user.into());
            Ok(())
        }
        fn idem(&mut self, _: seckill::ledger::IdemRecord) -> anyhow::Result<()> {
            Ok(())
        }
        fn pending(&mut self, _: &str, p: seckill::ledger::PendingRow<'_>) -> anyhow::Result<()> {
            self.pending
                .push((p.seq, p.user_id.into(), p.pay_by.timestamp_micros()));
            Ok(())
        }
    }
    let mut seen = Seen::default();
    rig.ledger
        .recover(seckill::domain::now(), &mut seen)
        .await
        .unwrap();
    assert_eq!(seen.live, ["u2"]);
    assert_eq!(
        seen.pending,
        [
            (1, "u1".into(), WON + 1 + HOLD_US),
            (5, "u5".into(), WON + 5 + HOLD_US)
        ]
    );

    // A resolution written directly must find the order pending; otherwise nothing is written.
    let confirm = |id: &str| LedgerWrite::Confirm {
        order_id: id.into(),
        at: us(WON + 50).unwrap(),
    };
    rig.ledger.apply(&[&confirm("snap-1")]).await.unwrap();
    assert_eq!(rig.order("snap-1").await.state, OrderState::Confirmed);
    let again = rig.ledger.apply(&[&confirm("snap-3")]).await;
    assert!(again.unwrap_err().to_string().contains("not pending"));
    assert_eq!(rig.order("snap-3").await.state, OrderState::Expired);
}
