//! The waiting room under the schedule's faults: an opening (`seckill bench --scenario
//! opening`, docs/WAITING_ROOM.md) on a campaign of its own, beside the storm.
//!
//! A room writes too: every join, the draw of the pre-queue at `starts_at`, each admission
//! told with its ticket. Those writes must survive what a claim's survive, so a schedule may
//! draw an opening whose pre-queue, start and admissions fall inside the faulted part of the
//! storm. Its verifier holds the room to every promise while instances die, Redis restarts,
//! the disk fills and the clock steps: no order without an admission told, nobody admitted
//! before the start, never more admissions in a second than the rate, the pre-queue before
//! any later joiner, later joiners in arrival order, an admission never changed once told,
//! every claim without a valid ticket refused 403 `not_admitted`; and the ledger's own
//! invariants for the opening's campaign; and no answer the contract does not allow. Once
//! every fault is healed, each user's place is read back: an admission as told, and nobody
//! placed unknown (`read_back`). Every violation is a finding. An under-sell is left to the
//! storm: the opening's users claim once and leave on `sold_out`, so units a fault gave back
//! later are never claimed again.
//!
//! Not drawn where Redis can go back in time (a snapshot restore, a Cluster replica promoted
//! behind its master): a room loses the joins and draws such a Redis forgot
//! (docs/WAITING_ROOM.md, "What is durable"), and the answer-by-answer excuses the storm's
//! claims get there ([`super::excuse`]) are not written for the room's answers.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::Serialize;

use tokio::task::JoinHandle;

use super::cluster::{Cluster, Fsync, ADMIN_TOKEN};
use super::finding::{finding, Finding};
use super::schedule::{Deployment, Schedule};
use super::{ChaosOpts, Totals};
use crate::bench::client::{Client, SETTLE};
use crate::bench::opening::OpeningReport;
use crate::bench::{BenchOpts, ScenarioName};
use crate::domain::RoomAnswer;

/// The opening a schedule drew.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Plan {
    pub users: u64,
    pub admit_per_second: u32,
}

impl Plan {
    /// An opening of `users` whose admissions take half of a `storm_secs` storm.
    pub fn new(users: u64, storm_secs: f64) -> Plan {
        let rate = (users as f64 / (storm_secs * 0.5)).ceil();
        Plan {
            users,
            admit_per_second: rate.clamp(1.0, 100_000.0) as u32,
        }
    }
}

/// The bench run of a schedule's opening: its pre-queue lasts 30% of the storm, later joiners
/// come over as long again, and the admissions run until about 80% of it, where the last
/// fault is over.
fn bench_opts(s: &Schedule, plan: Plan, urls: &str, admin_token: &str) -> BenchOpts {
    let mut o = BenchOpts::new(urls, admin_token, ScenarioName::Opening);
    o.users = Some(plan.users);
    o.admit_per_second = Some(plan.admit_per_second);
    o.prequeue = Some(s.storm.mul_f64(0.3).max(Duration::from_secs(1)));
    o.connections = Some(16);
    o.timeout = Duration::from_secs(5);
    o.drain_timeout = Duration::from_secs(90);
    o.seed = s.seed ^ s.index ^ 0x0be1;
    o.single_pass = true;
    o
}

/// Starts the schedule's opening, if it drew one and the settings keep a room's places
/// (else says why it is not run).
pub fn start(
    s: &Schedule,
    opts: &ChaosOpts,
    cluster: &Cluster,
) -> Option<JoinHandle<anyhow::Result<OpeningReport>>> {
    let plan = s.opening?;
    let always = opts.appendfsync == Fsync::Always;
    if let Some(why) = not_durable(s, always, opts.redis_wait_replicas) {
        println!("  the opening is not run: {why}, so the room's places are not durable");
        return None;
    }
    let o = bench_opts(s, plan, &cluster.urls().join(","), ADMIN_TOKEN);
    Some(tokio::spawn(
        async move { crate::bench::opening::run(&o).await },
    ))
}

/// The opening's run once it is over; a panic is a failed run.
pub async fn finished(
    task: JoinHandle<anyhow::Result<OpeningReport>>,
) -> anyhow::Result<OpeningReport> {
    task.await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("the opening panicked: {e}")))
}

/// Every finding of the opening once every fault is healed, its line printed and its
/// figures added to `totals`.
pub async fn verdict(
    run: &anyhow::Result<OpeningReport>,
    cluster: &Cluster,
    totals: &mut Totals,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Ok(r) = run {
        println!("  {}", summary(r));
        totals.openings += 1;
        totals.opening_admitted += r.told.iter().filter(|(_, t)| t.is_some()).count() as u64;
        out.extend(read_back(r, &cluster.urls(), ADMIN_TOKEN).await);
    }
    out.extend(findings(run));
    out
}

/// Why a drawn opening is not run with these settings, if it is not: the room's places are
/// durable in Redis only with `appendfsync always`, and behind Sentinel only while every
/// answer waits for a replica (docs/WAITING_ROOM.md, "What is durable").
fn not_durable(
    s: &Schedule,
    appendfsync_always: bool,
    wait_replicas: Option<u32>,
) -> Option<&'static str> {
    match s.deployment {
        Deployment::Embedded => None,
        _ if !appendfsync_always => Some("Redis does not fsync every write"),
        Deployment::Sentinel if wait_replicas == Some(0) => {
            Some("answers do not wait for a replica")
        }
        _ => None,
    }
}

/// The opening's findings: each of its violations, answers the contract does not allow, or
/// the run failing.
fn findings(run: &anyhow::Result<OpeningReport>) -> Vec<Finding> {
    let r = match run {
        Ok(r) => r,
        Err(e) => return vec![finding(format!("the opening did not run: {e:#}"))],
    };
    let mut out: Vec<Finding> = r
        .non_200
        .iter()
        .filter(|(status, _)| **status != 503)
        .map(|(status, n)| {
            finding(format!(
                "opening: {n} joins, reads or claims with a valid ticket answered HTTP {status}, \
                 which the contract does not allow"
            ))
        })
        .collect();
    out.extend(r.violations().map(|v| Finding {
        what: format!(
            "opening: invariant {} ({:?}): {}",
            v.invariant.number(),
            v.invariant,
            v.message
        ),
        orders: v.orders.clone(),
    }));
    match &r.verification {
        None => out.push(finding("the opening did not verify".into())),
        Some(v) if !v.drained => out.push(finding(format!(
            "the opening's ledger did not settle within the drain timeout ({:.1}s)",
            v.drain_seconds
        ))),
        Some(_) => {}
    }
    out
}

/// Reads back, once every fault is healed, the place of every user a join placed, from every
/// instance: an admission told must be read as told, ticket and all, and no placed
/// user may be unknown (404), whatever the faults did after the bench's own reads.
async fn read_back(r: &OpeningReport, urls: &[String], admin_token: &str) -> Vec<Finding> {
    let clients: Vec<Client> = urls.iter().map(|u| Client::new(u, admin_token)).collect();
    // One deadline for the whole read-back: a deployment that does not come back fails it
    // within SETTLE, not once per user.
    let deadline = Instant::now() + SETTLE;
    let mut changed = Vec::new();
    for (user, told) in &r.told {
        for c in &clients {
            match (read(c, &r.campaign, user, deadline).await, told) {
                (Ok(now), Some(told)) if now != *told => {
                    changed.push(format!("{user}: told {told:?}, read {now:?}"))
                }
                (Ok(_), _) => {}
                (Err(e), told) => changed.push(format!("{user}: told {told:?}, read {e:#}")),
            }
        }
    }
    if changed.is_empty() {
        return Vec::new();
    }
    let shown: Vec<&str> = changed.iter().take(5).map(String::as_str).collect();
    vec![finding(format!(
        "opening: {} of {} reads of placed users ({} instances each) came back wrong once the \
         faults were healed: {}",
        changed.len(),
        r.told.len() * clients.len(),
        clients.len(),
        shown.join("; ")
    ))]
}

/// `user`'s place, read again while the deployment answers 503 or not at all, until
/// `deadline` (one try after it).
async fn read(
    c: &Client,
    campaign: &str,
    user: &str,
    deadline: Instant,
) -> anyhow::Result<RoomAnswer> {
    let url = c.url(&format!("/v1/campaigns/{campaign}/queue/{user}"));
    loop {
        let sent = c
            .http()
            .get(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        let retry = match sent {
            Ok(resp) if resp.status() == StatusCode::OK => return Ok(resp.json().await?),
            Ok(resp) if resp.status() == StatusCode::SERVICE_UNAVAILABLE => {
                format!("answered 503: {}", resp.text().await.unwrap_or_default())
            }
            Ok(resp) => anyhow::bail!(
                "answered {}: {}",
                resp.status(),
                resp.text().await.unwrap_or_default()
            ),
            Err(e) => format!("no answer: {e}"),
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "{retry}, past the {SETTLE:?} to settle"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One line about the opening for the schedule's output.
fn summary(r: &OpeningReport) -> String {
    let f = &r.room;
    format!(
        "opening: {} users ({} in the pre-queue), {} + {} later admitted, {} sold out in the \
         room, {} gave up; most admissions in one second {} (rate {}); pre-queue rank correlation {}; \
         claims without a valid ticket refused {}/{}",
        r.params.users,
        f.prequeue_users,
        f.admitted_prequeue,
        f.admitted_later,
        f.sold_out_in_room,
        r.gave_up,
        f.max_admitted_in_one_second,
        r.params.admit_per_second,
        f.prequeue_rank_correlation
            .map_or_else(|| "-".to_owned(), |c| format!("{c:.3}")),
        f.cheat_claims_refused_not_admitted,
        f.cheat_claims,
    )
}
