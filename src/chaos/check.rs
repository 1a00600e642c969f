//! The verdict on one schedule: the bench's invariants, the answers the contract allows, the
//! ledger read directly, and processes that died on their own.
//!
//! `seckill bench` already reads the campaign and every order back through the API and checks
//! the invariants of `shared/ARCHITECTURE.md` (no oversell, no code twice, per-user limits,
//! every `won` listed exactly once as answered, no order beyond the answers that were lost,
//! remaining consistent, one answer per Idempotency-Key, no under-sell once a `sold_out` came
//! after the last supply change). A 503 carrying `"outcome": "unknown"` and a request with no
//! answer at all count as "maybe won"; every other 503 as "nothing changed", so an order they
//! left behind is a phantom. Here the campaign adds what a fault can break besides:
//!
//! - **answers outside the contract**: a status other than 200 and 503 for a valid claim (a
//!   500, a 4xx), or a 200 whose body is not a claim answer;
//! - **the ledger itself**, read with SQL rather than through the API (which could hide a
//!   duplicate), held to every guarantee a row can show ([`super::ledger`]), and its kept
//!   Idempotency-Key answers to what the bench was told ([`super::keys`]);
//! - **crashes**: a process that died without being killed, other than a clean exit with
//!   status 1 after logging why (a dependency unreachable at start), which a supervisor
//!   restarts and the campaign counts.

use super::cluster::Cluster;
use super::excuse::Excused;
use super::finding::{finding, Finding};
use crate::bench::BenchReport;

/// Every finding of one schedule (empty: clean).
pub async fn verdict(
    report: &BenchReport,
    first_stock: u64,
    cluster: &Cluster,
    crashes: Vec<String>,
    excused: &Excused,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    match &report.verification {
        None => out.push(finding("the bench did not verify".into())),
        Some(v) => {
            if !v.drained {
                out.push(finding(format!(
                    "the ledger did not settle within the drain timeout ({:.1}s)",
                    v.drain_seconds
                )));
            }
            for x in &v.violations {
                if excused.covers(x) {
                    continue;
                }
                out.push(Finding {
                    what: format!(
                        "invariant {} ({:?}): {}",
                        x.invariant.number(),
                        x.invariant,
                        x.message
                    ),
                    orders: x.orders.clone(),
                });
            }
        }
    }
    for (status, n) in &report.non_2xx {
        if *status != 503 {
            out.push(finding(format!(
                "{n} claims answered HTTP {status}, which the contract does not allow for a valid claim"
            )));
        }
    }
    if report.bad_bodies > 0 {
        out.push(finding(format!(
            "{} claims answered 200 with a body that is not a claim answer",
            report.bad_bodies
        )));
    }
    match super::ledger::read(cluster, &report.campaign).await {
        Ok((rows, campaign)) => {
            match super::keys::read(cluster, &report.campaign).await {
                Ok(Some(kept)) => out.extend(super::keys::check(&kept, &report.keyed, &rows)),
                Ok(None) => {}
                Err(e) => out.push(finding(format!(
                    "cannot read the kept Idempotency-Key answers: {e:#}"
                ))),
            }
            out.extend(super::ledger::supply(
                first_stock,
                &report.events,
                campaign.0,
            ));
            out.extend(super::ledger::check(
                &excused.kept(&report.wins),
                &rows,
                campaign,
                &excused.kept_confirms(&report.confirmed),
                report.plan.hold.is_some(),
            ))
        }
        Err(e) => out.push(finding(format!("cannot read the ledger directly: {e:#}"))),
    }
    out.extend(crashes.into_iter().map(finding));
    out
}
