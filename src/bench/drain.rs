//! Waiting for the pipeline to drain before verifying.
//!
//! The bench only speaks HTTP, so it watches the ledger through the API, and asks the
//! deployment's health check for its pipeline lag. The rule: the ledger has drained when
//! (1) every order id answered `won` is listed by `GET /v1/campaigns/{id}/orders`, and (2) two
//! consecutive reads `interval` apart agree on the number of orders, the units in active
//! orders and the campaign's `remaining`, and `GET /healthz` of every instance answers 200 with
//! no `pipeline_lag` (a claim answered with an unknown outcome leaves an order nobody was told
//! about in the stream) and no `gate_behind` (a cancel or restock answered 503 after the ledger
//! saved it is applied to the gate by a catch-up task), and (3)
//! no listed order is still `pending` after its `pay_by`: its expiry is decided but not yet applied
//! (in scale-out the gate expired it and the transition waits in the stream behind a slow or
//! restarting consumer, so two equal reads prove nothing). An embedded deployment commits before it
//! answers, so it drains on the second read; a streaming deployment drains once its consumers catch
//! up.
//! A `won` that is never listed does not hold the drain until `timeout`: once (2) and (3) held
//! for five seconds in a row — nothing in any stream, nothing being caught up, the same reads —
//! the ledger has drained and the unlisted wins are missing (a Redis restored from an older
//! snapshot takes the wins answered after it with it).
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

/// What the deployment itself says is still on its way to the ledger or the gate, summed over
/// every instance: scale-out's `pipeline_lag` (won orders not yet in the ledger) and
/// `gate_behind` (campaigns whose admin change the ledger saved and the gate has yet to take)
/// from `GET /healthz`; 0 where the deployment has neither (embedded). `None` when an instance
/// does not answer 200, or a scale-out instance answers without either figure: a deployment
/// that cannot say is not drained (an unreadable health used to count as an empty stream).
async fn backlog(instances: &[Client]) -> Option<u64> {
    let mut total = 0;
    for client in instances {
        let resp = client
            .http()
            .get(client.url("/healthz"))
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body: serde_json::Value = resp.json().await.ok()?;
        // A scale-out instance (it reports its Redis) that could not read its lag cannot say.
        let scale_out = body.get("redis_settings").is_some() || body.get("gate_behind").is_some();
        for field in ["pipeline_lag", "gate_behind"] {
            match body[field].as_u64() {
                Some(n) => total += n,
                None if scale_out => return None,
                None => {}
            }
        }
    }
    Some(total)
}

/// How long the deployment must stay quiet before the wins it does not list count as missing.
const QUIET: Duration = Duration::from_secs(5);

pub async fn wait(
    client: &Client,
    instances: &[Client],
    campaign: &str,
    wins: &[Win],
    timeout: Duration,
    interval: Duration,
) -> anyhow::Result<Drained> {
    let started = Instant::now();
    let mut previous = None;
    let mut quiet_since: Option<Instant> = None;
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
                quiet_since = None;
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
        // still be in the stream, and admin changes answered 503 wait for the catch-up: only
        // the deployment's own counts say both are done.
        let stable = previous == Some(print)
            && overdue_pending(&orders) == 0
            && backlog(instances).await == Some(0);
        quiet_since = if stable {
            quiet_since.or(Some(Instant::now()))
        } else {
            None
        };
        // Nothing on its way anywhere for a while: a `won` still unlisted is missing, not late
        // (a Redis gone back to an older snapshot takes such wins with it).
        let quiet = quiet_since.is_some_and(|q| q.elapsed() >= QUIET);
        let settled = stable && (all_won_listed || quiet);
        let timed_out = started.elapsed() >= timeout;
        if settled || timed_out {
            return Ok(Drained {
                view,
                orders,
                waited: started.elapsed(),
                reads,
                settled,
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
