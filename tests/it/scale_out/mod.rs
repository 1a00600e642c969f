//! Scale-out tests beyond the conformance suite: several real `seckill serve` processes on one
//! Redis and one PostgreSQL, a SIGKILLed worker, a PostgreSQL outage and PostgreSQL refusing
//! writes, Redis kill -9 with AOF (and outages of several lengths under load, single node and
//! a Cluster master), a Redis Cluster, poison orders, rebuilding the gate from the ledger, the
//! rate limiter failing open, supervised background tasks dying, and Redis settings checks.

mod batch;
mod cancel;
mod cancel_outage;
mod cluster;
mod cluster_failover;
mod cluster_frozen;
mod cluster_outage;
mod cluster_reset;
mod demoted;
mod dormant;
mod fail_open;
mod guards;
mod holders;
mod holds_ledger;
mod ledger_rules;
mod lineage_bounds;
mod outages;
mod pg_refuses;
mod pipeline;
mod poison;
mod poison_cancel;
pub(crate) mod procs;
mod rebuild;
mod rebuild_race;
mod reclaim_lease;
mod redis_outage;
mod redis_settings;
mod reissued;
mod replica_lag;
mod replica_waits;
mod room_faults;
mod room_replicas;
mod sentinel;
mod sentinel_failover;
mod sentinel_kill;
mod stale_ack;
mod stale_resolutions;
mod stale_snapshot;
mod stream_rebuild;
mod supervised;
mod two_instances;
mod webhook_takeover;
mod worker_crash;

use std::collections::{HashMap, HashSet};

use seckill::bench::client::Client;
use seckill::domain::{ClaimAnswer, Order, Outcome};

use crate::invariants;

/// Every won answer with its user, from any number of storms.
pub fn won_of(answers: &[(String, ClaimAnswer)]) -> Vec<(String, ClaimAnswer)> {
    answers
        .iter()
        .filter(|(_, a)| a.outcome == Outcome::Won)
        .cloned()
        .collect()
}

/// Consumer `consumer` of the order pipeline's group reads up to `count` new entries of
/// `stream` and does nothing with them (a consumer that dies holding them).
pub async fn read_as(
    conn: &mut impl redis::aio::ConnectionLike,
    stream: &str,
    consumer: &str,
    count: usize,
) {
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(seckill::engine::scale_out::GROUP)
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query_async(conn)
        .await
        .unwrap();
}

/// The won answers (`user: order id`) that are not that buyer's order among `orders`.
pub fn not_their_order(won: &[(String, ClaimAnswer)], orders: &[Order]) -> Vec<String> {
    let by_id: HashMap<&str, &str> = orders
        .iter()
        .map(|o| (o.order_id.as_str(), o.user_id.as_str()))
        .collect();
    won.iter()
        .filter(|(u, a)| by_id.get(a.order_id.as_deref().unwrap()) != Some(&u.as_str()))
        .map(|(u, a)| format!("{u}: {}", a.order_id.as_deref().unwrap()))
        .collect()
}

/// After the pipeline drained: the ledger holds exactly the won orders (no more, none twice)
/// and every invariant holds.
pub async fn check_exact(
    client: &Client,
    campaign: &str,
    won: &[(String, ClaimAnswer)],
    sold_out: bool,
) {
    let view = client.campaign(campaign).await.unwrap();
    let orders = client.all_orders(campaign).await.unwrap();
    invariants::check(&view, &orders, won, sold_out);
    let answered: HashSet<&str> = won
        .iter()
        .map(|(_, a)| a.order_id.as_deref().unwrap())
        .collect();
    assert_eq!(answered.len(), won.len(), "an order id was answered twice");
    let stored: HashSet<&str> = orders.iter().map(|o| o.order_id.as_str()).collect();
    assert_eq!(
        stored, answered,
        "the ledger holds other orders than were won"
    );
    let mut per_user: HashMap<&str, u64> = HashMap::new();
    for (user, a) in won {
        *per_user.entry(user).or_default() += a.qty.unwrap();
    }
    assert!(
        per_user.values().all(|held| *held <= view.per_user_limit),
        "a user won more than the limit"
    );
}
