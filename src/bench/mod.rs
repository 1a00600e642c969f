//! `seckill bench`: storm a running deployment like a real sale, report speed like `ab`/`oha`,
//! then prove nothing went wrong.
//!
//! The seeds judge a flash sale with `ab -c 20 -n 100` and a look at two log files; that says
//! nothing about oversell, lost orders or tail latency. A run here has four phases, each in its
//! own module:
//!
//! 1. **setup** — create a campaign from the [`scenario`] preset (or target an existing one),
//!    and for `soldout` claim the whole stock first;
//! 2. **storm** — C keep-alive connections ([`conn`]) fire claims from N simulated users
//!    ([`users`]), closed-loop or at a fixed rate, while admin [`events`] fire ([`storm`]);
//! 3. **drain + verify** — wait until the ledger stops changing ([`drain`]), read back the
//!    campaign and every order through the API and check every invariant ([`verify`]), then
//!    probe that malformed and unauthorised requests change nothing ([`probe`]);
//! 4. **report** — text or JSON ([`report`]); the exit status fails on any violation.
//!
//! The bench talks HTTP only, so it measures and verifies any deployment the same way.

pub mod client;
pub mod conn;
pub mod drain;
pub mod event_spec;
pub mod events;
pub mod feed;
pub mod fire;
pub mod html;
pub mod opening;
pub mod opts;
pub mod payer;
pub mod probe;
pub mod report;
pub mod scenario;
mod setup;
pub mod storm;
pub mod timeline;
pub mod users;
pub mod verify;

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

pub use opts::{BenchOpts, Pick, Progress, QtyRange, ScenarioName};
pub use report::BenchReport;
pub use storm::{Keyed, Win};
pub use verify::{Evidence, Invariant, Violation};

use crate::bench::client::Client;
use crate::domain::Kind;
use conn::Endpoint;
use event_spec::Action;
use scenario::Plan;
use storm::{Live, StormConfig};

/// Runs one bench: setup, storm, drain, verify. The caller prints the report.
pub async fn run(opts: &BenchOpts) -> anyhow::Result<BenchReport> {
    anyhow::ensure!(
        opts.scenario != ScenarioName::Opening,
        "--scenario opening runs through bench::opening::run"
    );
    let plan = Plan::resolve(opts)?;
    let verify = !opts.no_verify;
    let needs_token = verify || !plan.events.is_empty() || opts.campaign.is_none();
    let token = opts.admin_token.clone().unwrap_or_default();
    anyhow::ensure!(
        !needs_token || !token.is_empty(),
        "--admin-token (or SECKILL_ADMIN_TOKEN) is needed to create the campaign, fire events \
         and read orders back"
    );
    // Claims go to every listed instance; admin calls and reads to the first.
    let urls: Vec<&str> = opts.url.split(',').map(str::trim).collect();
    let client = Client::new(urls[0], &token);
    let mut endpoints = Vec::with_capacity(urls.len());
    for u in &urls {
        endpoints.push(Endpoint::resolve(u).await?);
    }

    let (campaign, kind, preexisting) = setup::campaign(&client, &plan, verify).await?;
    let claim_path = format!("/v1/campaigns/{campaign}/claims");
    let payer = plan
        .hold
        .map(|h| payer::Payer::start(client.clone(), campaign.clone(), h, plan.seed));
    let (mut wins, presold, presell_sold_out) = if plan.presell {
        setup::presell(&endpoints[0], &claim_path, plan.timeout).await?
    } else {
        (Vec::new(), 0, false)
    };

    let keep_wins = plan
        .events
        .iter()
        .any(|e| matches!(e.action, Action::Cancel(_)));
    let live = Live::new(keep_wins);
    let cfg = StormConfig {
        claim_path,
        shots: users::Shots::new(&plan),
        connections: plan.connections,
        stop: plan.stop,
        rate: plan.rate,
        timeout: plan.timeout,
        keep_keyed: plan.idempotency,
        keep_answers: false,
    };
    let cpu_before = cpu_seconds("self");
    let server = opts.server_pid.map(|p| p.to_string());
    let server_before = server.as_deref().and_then(cpu_seconds);
    let events_task = tokio::spawn(events::run(
        plan.events.clone(),
        urls.iter().map(|u| Client::new(u, &token)).collect(),
        campaign.clone(),
        kind == Kind::Codes,
        plan.stop,
        live.clone(),
    ));
    let show_progress = match opts.progress {
        Progress::Always => true,
        Progress::Never => false,
        Progress::Auto => std::io::stderr().is_terminal(),
    };
    let progress_task = show_progress.then(|| tokio::spawn(progress(live.clone())));
    let expected = match plan.stop {
        scenario::Stop::Duration(d) => Some(d),
        _ => None,
    };
    let timeline_task = tokio::spawn(timeline::record(
        live.clone(),
        timeline::interval_for(expected),
    ));
    let mut result = storm::run(cfg, &endpoints, live.clone()).await;
    let timeline = timeline_task.await.context("the timeline task panicked")?;
    let cpu = cpu_before
        .zip(cpu_seconds("self"))
        .map(|(a, b)| 100.0 * (b - a) / result.elapsed.as_secs_f64().max(1e-9));
    let server_cpu = server_before
        .zip(server.as_deref().and_then(cpu_seconds))
        .map(|(a, b)| 1e6 * (b - a) / result.tally.requests().max(1) as f64);
    let payments = match payer {
        Some(p) => Some(
            p.finish()
                .await
                .context("the payments of the holds preset")?,
        ),
        None => None,
    };
    let events = events_task.await.context("the event task panicked")?;
    if let Some(p) = progress_task {
        let _ = p.await;
    }

    let tally = &mut result.tally;
    let last_supply_change = events
        .iter()
        .filter(|e| e.spec.action.adds_supply())
        .filter_map(|e| e.done_at)
        .max();
    let sold_out_seen = match (tally.last_sold_out_sent, last_supply_change) {
        (Some(sent), Some(change)) => sent > change,
        (Some(_), None) => true,
        (None, None) => presell_sold_out,
        (None, Some(_)) => false,
    };
    wins.append(&mut tally.wins);
    let verification = if verify {
        if let Some(h) = plan.hold {
            payer::wait_resolved(&client, &campaign, h).await?;
        }
        let instances: Vec<Client> = urls.iter().map(|u| Client::new(u, &token)).collect();
        let drained = drain::wait(
            &client,
            &instances,
            &campaign,
            &wins,
            opts.drain_timeout,
            opts.drain_interval,
        )
        .await?;
        let cancelled: HashSet<String> = events
            .iter()
            .flat_map(|e| e.cancelled.iter().cloned())
            .collect();
        let mut violations = verify::check(&Evidence {
            view: &drained.view,
            orders: &drained.orders,
            preexisting: &preexisting,
            wins: &wins,
            keyed: &tally.keyed,
            keyed_uncertain: &tally.keyed_uncertain,
            unanswered: tally.transport_errors + tally.unknown_outcomes,
            exclusive: opts.campaign.is_none(),
            sold_out_seen,
            cancelled_by_bench: &cancelled,
        });
        let holds = payments.as_ref().map(|p| {
            // When the last qty-1 sold_out was sent (the server decided no earlier), as wall
            // time to compare with resolved_at; only one sent after the last restock and
            // cancel says every unit was sold once.
            let last_sold_out = tally
                .last_sold_out_sent
                .filter(|at| last_supply_change.is_none_or(|change| *at > change))
                .map(|at| {
                    crate::domain::now()
                        - chrono::TimeDelta::from_std(at.elapsed()).unwrap_or_default()
                });
            let total = drained.view.total;
            let (found, summary) =
                payer::check(&drained.orders, p, last_sold_out, total, &cancelled);
            violations.extend(found);
            summary
        });
        violations.extend(feed::check(&client, &campaign, &drained.orders, &preexisting).await?);
        // Only on the run's own campaign: against someone else's, a broken server would let
        // the probe pause or close a live sale.
        if opts.campaign.is_none() {
            violations.extend(probe::bad_input(&client, &campaign).await?);
        }
        Some(report::Verification::of(
            &drained,
            sold_out_seen,
            holds,
            violations,
        ))
    } else {
        None
    };

    let secs = result.elapsed.as_secs_f64().max(1e-9);
    let processed: u64 = tally.outcomes.values().sum();
    let corrected = storm::corrected(tally, result.elapsed, plan.connections, plan.rate.is_some());
    Ok(BenchReport {
        url: opts.url.clone(),
        campaign,
        presold,
        requests: tally.requests(),
        seconds: secs,
        requests_per_second: tally.requests() as f64 / secs,
        claims_per_second: processed as f64 / secs,
        latency_mode: if plan.rate.is_some() {
            "scheduled"
        } else {
            "corrected"
        },
        latency_ms: report::Latency::of(&corrected),
        latency_uncorrected_ms: report::Latency::of(&tally.latency),
        outcomes: tally
            .outcomes
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        non_2xx: tally.refused.clone(),
        bad_bodies: tally.bad_bodies,
        transport_errors: tally.transport_errors,
        failed_request_ids: tally.failed_ids.clone(),
        unknown_outcomes: tally.unknown_outcomes,
        connects: tally.connects,
        generator_cpu_percent: cpu,
        server_cpu_us_per_claim: server_cpu,
        events,
        verification,
        latency_percentiles: report::percentile_curve(&corrected, &tally.latency),
        timeline,
        plan,
        wins,
        keyed: std::mem::take(&mut tally.keyed),
        keyed_uncertain: std::mem::take(&mut tally.keyed_uncertain),
        confirmed_at: payments
            .as_ref()
            .map(|p| p.confirmed_at.clone())
            .unwrap_or_default(),
        confirmed_for: payments
            .as_ref()
            .map(|p| p.confirmed_for.clone())
            .unwrap_or_default(),
        confirmed: payments.map(|p| p.confirmed).unwrap_or_default(),
        last_sold_out_sent: tally.last_sold_out_sent,
    })
}

/// One progress line a second on stderr until the storm finishes.
async fn progress(live: Arc<Live>) {
    let tty = std::io::stderr().is_terminal();
    let mut last = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        if live.finished.load(Ordering::Acquire) {
            break;
        }
        let done = live.done.load(Ordering::Relaxed);
        let line = format!(
            "[{:>6.1}s] {done} requests, {}/s, won {}, errors {}",
            live.started.elapsed().as_secs_f64(),
            done - last,
            live.won.load(Ordering::Relaxed),
            live.errors.load(Ordering::Relaxed)
        );
        last = done;
        let mut err = std::io::stderr().lock();
        let _ = if tty {
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
    }
    if tty {
        let _ = writeln!(std::io::stderr());
    }
}

/// CPU seconds process `pid` (or `self`) used so far, user + system, from /proc on Linux.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux the project targets.
    Some(ticks as f64 / 100.0)
}
