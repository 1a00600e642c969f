//! Waiting for the pipeline to drain before verifying.
//!
//! The bench only speaks HTTP, so it watches the ledger through the API, and asks the
//! deployment's health check for its pipeline lag. The rule: the ledger has drained when
//! (1) every order id answered `won` is listed by `GET /v1/campaigns/{id}/orders`, and (2) two
//! consecutive reads `interval` apart agree on the number of orders, the units in active
//! orders and the campaign's `remaining`, and `GET /healthz` reports no `pipeline_lag` (a claim
//! answered with an unknown outcome leaves an order nobody was told about in the stream), and (3)
//! no listed order is still `pending` after its `pay_by`: its expiry is decided but not yet applied
//! (in scale-out the gate expired it and the transition waits in the stream behind a slow or
//! restarting consumer, so two equal reads prove nothing). An embedded deployment commits before it
//! answers, so it drains on the second read; a streaming deployment drains once its consumers catch
//! up.
//! After `timeout` the bench verifies what it has, and missing orders become violations.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::bench::client::Client;
use crate::domain::{CampaignView, Order, OrderState};

use super::storm::Win;

/// The ledger as read once it drained (or the wait timed out).
#[derive(Debug)]
pub struct Drained {
    pub view: CampaignView,
    pub orders: Vec<Order>,
    pub waited: Duration,
    pub reads: u32,
    /// False when the timeout ran out first.
    pub settled: bool,
}

/// A cheap fingerprint of a ledger read: orders listed, active units, remaining.
fn fingerprint(view: &CampaignView, orders: &[Order]) -> (usize, u64, u64) {
    let active = orders
        .iter()
        .filter(|o| o.state.is_live())
        .map(|o| o.qty)
        .sum();
    (orders.len(), active, view.remaining)
}

/// Orders listed as `pending` whose `pay_by` has passed: expiries not applied yet.
fn overdue_pending(orders: &[Order]) -> usize {
    let now = crate::domain::now();
    orders
        .iter()
        .filter(|o| o.state == OrderState::Pending && o.pay_by.is_some_and(|p| p <= now))
        .count()
}

/// Scale-out's `pipeline_lag` from `GET /healthz` (won orders not yet in the ledger); 0 where
/// the deployment has none (embedded) or the read fails (the listing decides then).
async fn lag(client: &Client) -> u64 {
    let Ok(resp) = client.http().get(client.url("/healthz")).send().await else {
        return 0;
    };
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    body["pipeline_lag"].as_u64().unwrap_or(0)
}

pub async fn wait(
    client: &Client,
    campaign: &str,
    wins: &[Win],
    timeout: Duration,
    interval: Duration,
) -> anyhow::Result<Drained> {
    let started = Instant::now();
    let mut previous = None;
    let mut reads = 0;
    loop {
        // A deployment coming back from a fault may refuse a read for a moment: retry until
        // the timeout, then report the error.
        let read = async {
            let orders = client.all_orders(campaign).await?;
            anyhow::Ok((orders, client.campaign(campaign).await?))
        };
        let (orders, view) = match read.await {
            Ok(r) => r,
            Err(e) if started.elapsed() < timeout => {
                tracing::debug!(error = %format!("{e:#}"), "ledger read failed; retrying");
                previous = None;
                tokio::time::sleep(interval).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        reads += 1;
        let print = fingerprint(&view, &orders);
        let listed: HashSet<&str> = orders.iter().map(|o| o.order_id.as_str()).collect();
        let all_won_listed = wins.iter().all(|w| listed.contains(w.order_id.as_str()));
        // Orders answered with an unknown outcome (a claim whose replica wait timed out) may
        // still be in the stream: only the deployment's own count says it is empty.
        let stable =
            previous == Some(print) && overdue_pending(&orders) == 0 && lag(client).await == 0;
        let timed_out = started.elapsed() >= timeout;
        if (all_won_listed && stable) || timed_out {
            return Ok(Drained {
                view,
                orders,
                waited: started.elapsed(),
                reads,
                settled: all_won_listed && stable,
            });
        }
        tracing::debug!(
            orders = print.0,
            all_won_listed,
            overdue_pending = overdue_pending(&orders),
            "waiting for the ledger to drain"
        );
        previous = Some(print);
        tokio::time::sleep(interval).await;
    }
}
