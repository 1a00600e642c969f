//! A batch with entries PostgreSQL refuses for their data: the good entries, transitions
//! included, are applied one by one in stream order; a refused new order is recorded and its
//! units go back in Redis; a refused transition is recorded without giving anything back.

use std::time::Duration;

use sqlx::Connection;

use seckill::domain::OrderState;
use seckill::engine::scale_out::Keys;
use seckill::ledger::Ledger;

use super::{drain, new_order, transition, Rig, WON};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_transition_is_recorded_without_a_release() {
    let mut rig = Rig::start("pz", 10, &[]).await;
    // The gate's counters as release.lua reads them: 5 of 10 units taken.
    let meta = Keys::new("pz").meta();
    let _: () = redis::cmd("HSET")
        .arg(&meta)
        .arg("total")
        .arg(10)
        .arg("remaining")
        .arg(5)
        .query_async(&mut rig.raw)
        .await
        .unwrap();
    // A rule the ledger enforces but the gate does not know: mallory's rows never persist.
    let mut conn = sqlx::PgConnection::connect(&rig.db).await.unwrap();
    sqlx::query(
        "ALTER TABLE orders ADD CONSTRAINT no_mallory CHECK (user_id <> 'mallory') NOT VALID",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let fourth = new_order("pz", 4, "u4", &[]);
    for e in [
        new_order("pz", 1, "u1", &[]),
        new_order("pz", 2, "mallory", &[]),
        transition("expired", WON + 30, &new_order("pz", 3, "mallory", &[])),
        fourth.clone(),
        transition("confirmed", WON + 40, &fourth),
    ] {
        rig.xadd("pz", &e).await;
    }
    let mut c = rig.consumer("one", 1000, Duration::from_secs(30)).await;
    let step = drain(&mut c).await;
    assert_eq!((step.read, step.persisted, step.poisoned), (5, 3, 2));

    assert_eq!(rig.order("pz-1").await.state, OrderState::Pending);
    assert_eq!(rig.order("pz-4").await.state, OrderState::Confirmed);
    assert!(rig.ledger.order("pz-3").await.unwrap().is_none());
    let failed = rig.ledger.failed_orders("pz").await.unwrap();
    let mut ids: Vec<_> = failed.iter().map(|(id, _)| id.clone().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["pz-2", "pz-3"]);
    assert!(
        failed.iter().all(|(_, why)| why.contains("no_mallory")),
        "{failed:?}"
    );
    let released: Vec<String> = redis::cmd("SMEMBERS")
        .arg(Keys::new("pz").released())
        .query_async(&mut rig.raw)
        .await
        .unwrap();
    assert_eq!(
        released,
        ["pz-2"],
        "only the refused new order is given back"
    );
    let remaining: u64 = redis::cmd("HGET")
        .arg(&meta)
        .arg("remaining")
        .query_async(&mut rig.raw)
        .await
        .unwrap();
    assert_eq!(remaining, 6);
}
