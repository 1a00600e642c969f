//! `seckill bench --scenario opening`: a sale that opens behind a waiting room
//! (docs/WAITING_ROOM.md), as its crowd lives it.
//!
//! The claim storm of the other presets cannot show a room's promises: they are about when
//! each user was let in, not about how fast claims are answered. Here every simulated user is
//! a task with a life: it joins (most before `starts_at`, the rest after), polls its place with
//! backoff (up to the start while in the pre-queue, then by the room's own `estimated_wait_ms`),
//! and claims once, with its ticket, as soon as it is admitted. Every tenth user also tries the
//! door without a valid ticket: none, a forged one, and another user's. At most `-c` requests
//! are in flight at once.
//!
//! Afterwards the ledger is drained and checked like any run ([`crate::bench::verify`]), and
//! [`check`] adds the room's promises: no order without an admission, nobody admitted before
//! the start, never more admissions in a second than the rate, the pre-queue admitted before
//! any later joiner, later joiners in arrival order, and the pre-queue's admission order
//! uncorrelated with its join order.

pub mod check;
mod report;
mod user;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

pub use report::OpeningReport;

use super::client::Client;
use super::opts::BenchOpts;
use super::report::Verification;
use super::verify::{self, Evidence};
use super::{drain, feed};
use user::{Shared, UserRun};

/// Share of the users that join after `starts_at`.
const LATER_SHARE: f64 = 0.3;

/// The run's settings, from the flags or their defaults for this scenario.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Params {
    pub users: u64,
    pub stock: u64,
    pub admit_per_second: u32,
    pub prequeue_seconds: f64,
    pub connections: usize,
    pub ticket_seconds: u32,
}

impl Params {
    fn resolve(o: &BenchOpts) -> anyhow::Result<Params> {
        anyhow::ensure!(
            o.campaign.is_none() && o.codes.is_none(),
            "--scenario opening creates its own stock campaign with a waiting room"
        );
        anyhow::ensure!(
            o.html.is_none(),
            "--html is not available for --scenario opening"
        );
        let users = o.users.unwrap_or(3_000);
        let p = Params {
            users,
            stock: o.stock.unwrap_or((users * 5 / 6).max(1)),
            admit_per_second: o.admit_per_second.unwrap_or(500),
            prequeue_seconds: o.prequeue.unwrap_or(Duration::from_secs(3)).as_secs_f64(),
            connections: o.connections.unwrap_or(64),
            ticket_seconds: 300,
        };
        anyhow::ensure!(p.users >= 1, "--users must be at least 1");
        anyhow::ensure!(p.connections >= 1, "--connections must be at least 1");
        anyhow::ensure!(
            (1..=100_000).contains(&p.admit_per_second),
            "--admit-per-second must be between 1 and 100000"
        );
        anyhow::ensure!(
            p.prequeue_seconds >= 0.5,
            "--prequeue must be at least 500ms"
        );
        Ok(p)
    }
}

/// Runs the opening: create, join, poll, claim, then drain and verify.
pub async fn run(opts: &BenchOpts) -> anyhow::Result<OpeningReport> {
    let params = Params::resolve(opts)?;
    let token = opts.admin_token.clone().unwrap_or_default();
    anyhow::ensure!(
        !token.is_empty(),
        "--admin-token (or SECKILL_ADMIN_TOKEN) is needed to create the campaign and read its \
         orders back"
    );
    let urls: Vec<&str> = opts.url.split(',').map(str::trim).collect();
    let instances: Vec<Client> = urls.iter().map(|u| Client::new(u, &token)).collect();
    let admin = instances[0].clone();

    let campaign = format!("bench-opening-{}", hex::encode(rand::random::<[u8; 4]>()));
    let prequeue = Duration::from_secs_f64(params.prequeue_seconds);
    let starts_at = crate::domain::now() + chrono::TimeDelta::from_std(prequeue)?;
    let view = admin
        .create_campaign(&json!({
            "id": campaign,
            "stock": params.stock,
            "per_user_limit": 1,
            "starts_at": starts_at,
            "waiting_room": {
                "admit_per_second": params.admit_per_second,
                "ticket_seconds": params.ticket_seconds,
                "shuffle": true,
            },
        }))
        .await
        .context("creating the opening's campaign")?;
    let starts_at = view.starts_at.unwrap_or(starts_at);
    let t0 = Instant::now();
    let start = t0 + prequeue;

    let shared = Arc::new(Shared::new(params.connections, &campaign, opts.timeout));
    let later = ((params.users as f64) * LATER_SHARE).round() as u64;
    let early = params.users - later;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..params.users {
        // The pre-queue joins over the first 80% of the wait, later joiners over as long again
        // after the start.
        let at = if i < early {
            t0 + prequeue.mul_f64(0.8 * i as f64 / early as f64)
        } else {
            start + prequeue.mul_f64((i - early) as f64 / later.max(1) as f64)
        };
        let client = instances[i as usize % instances.len()].clone();
        let run = UserRun {
            user: format!("u{}", i + 1),
            at,
            cheat: i % 10 == 0,
            seed: opts.seed ^ i,
        };
        tasks.spawn(user::live(shared.clone(), client, run));
    }
    let mut seen = Vec::with_capacity(params.users as usize);
    let mut wins = Vec::new();
    let mut told = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let done = done.context("a user task panicked")?;
        if done.placed {
            told.push((done.seen.user.clone(), done.told));
        }
        seen.push(done.seen);
        wins.extend(done.win);
    }
    let elapsed = t0.elapsed();
    let tally = shared.finish();

    let room = check::Room {
        starts_at,
        admit_per_second: params.admit_per_second,
        shuffle: true,
    };
    let (verification, fairness, room_violations) = if opts.no_verify {
        let (violations, fairness) = check::check(&room, &seen, &tally.cheats, &[]);
        (None, fairness, violations)
    } else {
        let drained = drain::wait(
            &admin,
            &instances,
            &campaign,
            &wins,
            opts.drain_timeout,
            opts.drain_interval,
        )
        .await?;
        let none = HashSet::new();
        let sold_out_seen = !opts.single_pass
            && (tally.claims_sold_out > 0 || seen.iter().any(|s| s.room_sold_out));
        let mut violations = verify::check(&Evidence {
            view: &drained.view,
            orders: &drained.orders,
            preexisting: &none,
            wins: &wins,
            keyed: &[],
            keyed_uncertain: &[],
            unanswered: tally.unanswered_claims,
            exclusive: true,
            sold_out_seen,
            cancelled_by_bench: &none,
        });
        violations.extend(feed::check(&admin, &campaign, &drained.orders, &none).await?);
        let (room_violations, fairness) =
            check::check(&room, &seen, &tally.cheats, &drained.orders);
        violations.extend(room_violations);
        let v = Verification::of(&drained, sold_out_seen, None, violations);
        (Some(v), fairness, Vec::new())
    };
    let mut report = OpeningReport::new(
        opts.url.clone(),
        campaign,
        params,
        elapsed,
        tally,
        fairness,
        verification,
        room_violations,
    );
    report.told = told;
    Ok(report)
}
