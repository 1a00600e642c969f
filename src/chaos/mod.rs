//! `seckill chaos`: randomized fault schedules against real deployments, checked afterwards.
//!
//! seckill's crash and outage tests each inject one fault at one moment; production breaks
//! differently (a kill during a restock, Redis dying while the worker is frozen mid-batch).
//! In the spirit of Jepsen's nemeses and TigerBeetle's VOPR, at the scale of one machine, a
//! campaign runs schedule after schedule, each on a fresh deployment:
//!
//! 1. [`schedule`]: the seed (printed first) and the schedule's number make its workload and
//!    its timed faults, printed before it runs, so any failure is replayed exactly;
//! 2. [`cluster`]: the deployment's real processes (this binary as `serve`/`worker`,
//!    redis-server with AOF, a throwaway PostgreSQL) on fixed ports in a temp directory;
//! 3. a mixed storm by `seckill bench` (repeat clickers with Idempotency-Keys, restocks and
//!    pause/resume retried with their key, cancels, held orders and payers) and [`locks`]
//!    clients (and, drawn, an [`opening`] behind a waiting room on a campaign of its own),
//!    while the [`nemesis`] injects the faults (with [`rewind`] for a Redis restored
//!    from an older snapshot, [`sentinel`] and [`shards`] for failovers behind Sentinel and in
//!    a Redis Cluster, and [`clock`] for a step of the embedded server's wall clock);
//! 4. [`check`]: once every fault is healed and the pipeline drained, the bench's invariant
//!    checker plus the contract's allowed answers, the [`ledger`]'s rows and [`keys`]'s kept
//!    answers read with SQL, the lock history, and crashes; [`excuse`] says which answers a
//!    snapshot restore, or a Cluster failover to a replica that lagged, may take back.
//!
//! A failure prints the seed, the schedule and the offending orders; the exit status is 2.

pub mod check;
pub mod clock;
pub mod cluster;
pub mod disk;
pub mod excuse;
pub mod finding;
pub mod keys;
pub mod ledger;
pub mod locks;
pub mod nemesis;
pub mod opening;
pub mod proxy;
pub mod rewind;
pub mod schedule;
pub mod sentinel;
pub mod sentinel_faults;
pub mod servers;
pub mod shard_faults;
pub mod shards;
mod totals;

pub use totals::{print_totals, Totals};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

use crate::bench::{BenchOpts, Pick, QtyRange, ScenarioName};
use cluster::{Cluster, Fsync};
use schedule::{Deployment, Schedule, Shape};

#[derive(Debug, Clone, Args)]
pub struct ChaosOpts {
    /// Seed of the campaign (default: random, printed first).
    #[arg(long, env = "SECKILL_CHAOS_SEED")]
    pub seed: Option<u64>,

    /// Deployments to run, each schedule on each.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "embedded,scale-out"
    )]
    pub deployment: Vec<Deployment>,

    /// Schedules per deployment.
    #[arg(long, default_value_t = 3)]
    pub schedules: u64,

    /// Number of the first schedule (to replay schedule N of a seed: `--first N --schedules 1`).
    #[arg(long, default_value_t = 0)]
    pub first: u64,

    /// Storm length of each schedule; faults all happen in its first 80%.
    #[arg(long, value_parser = crate::duration::parse, default_value = "20s")]
    pub storm: Duration,

    /// Faults per schedule (Sentinel: and up to two more on a replica).
    #[arg(long, default_value_t = 4)]
    pub faults: usize,

    /// Add the 30-second PostgreSQL outage to the scale-out faults (needs --storm of 40s+).
    #[arg(long)]
    pub long_outage: bool,

    /// Only faults on this process: instance-0, instance-1, worker, redis-server, postgres,
    /// data-disk, redis-link, redis-primary, redis-replica, redis-snapshot, server-clock,
    /// redis-master (e.g.
    /// `--only redis-server --appendfsync everysec` to measure that policy).
    #[arg(long)]
    pub only: Option<schedule::Target>,

    /// Redis's `appendfsync` policy (`everysec` to measure what that trade-off costs).
    #[arg(long, value_enum, default_value = "always")]
    pub appendfsync: Fsync,

    /// Sentinel deployment: `--redis-wait-replicas` of every instance and the worker
    /// (default: theirs, 1 behind Sentinel; 0 to measure what the asynchronous replica costs).
    #[arg(long)]
    pub redis_wait_replicas: Option<u32>,

    /// Concurrent client connections of the storm.
    #[arg(long, short = 'c', default_value_t = 24)]
    pub connections: usize,

    /// Keep going after a schedule with findings (the default stops at the first).
    #[arg(long)]
    pub keep_going: bool,

    /// Print the schedules and run nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Also print the totals as one JSON document at the end.
    #[arg(long)]
    pub json: bool,
}

/// Runs the campaign; prints as it goes. `Ok(totals)` even when violations were found.
pub async fn run(opts: &ChaosOpts) -> anyhow::Result<Totals> {
    let seed = opts.seed.unwrap_or_else(rand::random);
    println!("seckill chaos: seed {seed} (replay with --seed {seed})");
    let started = Instant::now();
    let mut totals = Totals {
        seed,
        ..Totals::default()
    };
    let shape = Shape {
        storm: opts.storm,
        faults: opts.faults,
        long_outage: opts.long_outage,
        only: opts.only,
    };
    'outer: for index in opts.first..opts.first + opts.schedules {
        for &d in &opts.deployment {
            let s = Schedule::generate(seed, index, d, shape);
            print!("{s}");
            if opts.dry_run {
                continue;
            }
            let findings = one(&s, opts, &mut totals).await?;
            if findings.is_empty() {
                println!("  -> clean\n");
                continue;
            }
            let mut text = format!("{s}");
            for f in &findings {
                text.push_str(&format!("  VIOLATION: {}\n", f.what));
                if !f.orders.is_empty() {
                    let shown: Vec<&str> = f.orders.iter().take(20).map(String::as_str).collect();
                    text.push_str(&format!(
                        "    orders: {}{}\n",
                        shown.join(", "),
                        if f.orders.len() > 20 { ", …" } else { "" }
                    ));
                }
            }
            println!("{text}");
            totals.violations += findings.len() as u64;
            totals.failures.push(text);
            if !opts.keep_going {
                break 'outer;
            }
        }
    }
    totals.seconds = started.elapsed().as_secs_f64();
    Ok(totals)
}

/// One schedule on a fresh deployment; its findings.
async fn one(
    s: &Schedule,
    opts: &ChaosOpts,
    totals: &mut Totals,
) -> anyhow::Result<Vec<finding::Finding>> {
    let cluster = Cluster::start(
        s.deployment,
        s.replicas,
        opts.appendfsync,
        opts.redis_wait_replicas,
        s.faults.iter().any(|f| f.target == schedule::Target::Clock),
    );
    let cluster = Arc::new(cluster.await?);
    if let Some(d) = &cluster.disk {
        totals.data_disk = Some(d.how().to_owned());
    }
    let bench = bench_opts(s, &cluster.urls().join(","), opts.connections);
    let start = Instant::now();
    let nemesis = tokio::spawn(nemesis::run(
        cluster.clone(),
        s.faults.clone(),
        start,
        s.storm.mul_f64(0.85),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let supervisor = {
        let (cluster, stop) = (cluster.clone(), stop.clone());
        tokio::spawn(async move { cluster.supervise(&stop).await })
    };
    let locks = s.locks.then(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(locks::run(
            cluster.urls(),
            cluster::ADMIN_TOKEN.to_owned(),
            cluster.pg_url.clone(),
            format!("chaos-{}-{}", s.seed, s.index),
            s.seed ^ s.index,
            stop.clone(),
        ));
        let storm = s.storm;
        tokio::spawn(async move {
            tokio::time::sleep(storm).await;
            stop.store(true, Ordering::Release);
        });
        task
    });
    let opening = opening::start(s, opts, &cluster);
    let report = crate::bench::run(&bench).await;
    let opening = match opening {
        Some(t) => Some(opening::finished(t).await),
        None => None,
    };
    let applied = nemesis.await?;
    let locks = match locks {
        Some(t) => Some(t.await?),
        None => None,
    };
    stop.store(true, Ordering::Release);
    supervisor.await?;
    let exits = cluster.exits().await;
    cluster.heal().await.inspect_err(|_| keep_logs(&cluster))?;
    totals.supervised_restarts += exits.iter().filter(|(crash, _)| !crash).count() as u64;
    let crashes: Vec<String> = exits
        .into_iter()
        .filter(|(c, _)| *c)
        .map(|(_, l)| l)
        .collect();
    // A run that could not be verified (the deployment never answered again, as above when it
    // did not heal) keeps its logs as a violation does: they say why.
    let report = report.inspect_err(|_| keep_logs(&cluster))?;
    for a in &applied {
        match (&a.error, a.injected_s) {
            (Some(e), None) => {
                totals.faults_skipped += 1;
                println!("  {}: {e}", a.fault);
            }
            (Some(e), Some(_)) => println!("  {}: {e}", a.fault),
            _ => {}
        }
        if let Some(note) = &a.note {
            println!("  {}: {note}", a.fault);
        }
        if let Some(moved) = a.failed_over {
            let what = match (a.fault.kind, moved) {
                (schedule::Kind::Failover, true) => "SENTINEL FAILOVER",
                (schedule::Kind::Failover, false) => "SENTINEL FAILOVER without failover",
                (schedule::Kind::Handover, true) => "CLUSTER FAILOVER",
                (schedule::Kind::Handover, false) => "CLUSTER FAILOVER without failover",
                (_, true) => "after kill -9",
                (_, false) => "kill -9 without failover",
            };
            *totals.failovers.entry(what.to_owned()).or_default() += 1;
        }
    }
    for (t, k, n) in nemesis::tally(&applied) {
        *totals.faults.entry(format!("{k} {t}")).or_default() += n;
    }
    let windows: Vec<rewind::Window> = applied.iter().filter_map(|a| a.rewound).collect();
    let excused = match excuse::Excused::read(&report, &cluster, &windows).await {
        Ok(e) => e,
        Err(e) => anyhow::bail!("reading what a snapshot restore or failover took back: {e:#}"),
    };
    if !windows.is_empty() {
        println!(
            "  Redis back in time (a snapshot restore, a Cluster failover): {} answered wins \
             taken back, {} refused by the ledger \
             (failed_orders), {} confirms answered 200 taken back; {} wins and {} confirms \
             answered in the window, {} confirms answered 200 about a reissued order number's \
             other order",
            excused.lost,
            excused.refused,
            excused.confirms_lost,
            excused.in_window,
            excused.confirms_in_window,
            excused.reissued_confirms.len()
        );
        totals.lost_to_rewind += excused.lost as u64;
        totals.confirms_lost_to_rewind += excused.confirms_lost as u64;
        totals.refused_after_rewind += excused.refused as u64;
    }
    let mut findings = check::verdict(&report, s.stock, &cluster, crashes, &excused).await;
    if let Some(run) = &opening {
        findings.extend(opening::verdict(run, &cluster, totals).await);
    }
    if let Some(h) = &locks {
        // A promoted replica may not know a lease (docs/LOCKS.md), nor may a Redis that
        // fsyncs once a second after a kill -9, nor one restored from an older snapshot.
        let exclusive = !applied.iter().any(|a| a.failed_over == Some(true))
            && opts.appendfsync == Fsync::Always;
        findings.extend(locks::check(h, exclusive, &windows));
        println!(
            "  locks: {} grants, {} extends, {} releases, {} fenced writes ({} stale refused), {} calls unanswered",
            h.grants.len(),
            h.extends,
            h.releases,
            h.writes.len(),
            h.stale_writes_refused,
            h.unavailable
        );
        totals.lock_grants += h.grants.len() as u64;
        totals.stale_writes_refused += h.stale_writes_refused;
    }
    if let Some(h) = report.verification.as_ref().and_then(|v| v.holds.as_ref()) {
        println!(
            "  holds: confirms answered 200 {}, 409 {}, unanswered attempts {}; {} confirmed, {} expired",
            h.confirm_answered_200, h.confirm_answered_409, h.confirm_failed, h.confirmed, h.expired
        );
        totals.confirms_200 += h.confirm_answered_200 as u64;
        totals.confirmed += h.confirmed as u64;
        totals.expired += h.expired as u64;
    }
    if applied.iter().any(|a| a.failed_over == Some(true)) {
        match ledger::lost_wins(&report, &cluster).await {
            Ok(lost) => {
                let shown: Vec<&str> = lost.iter().take(20).map(String::as_str).collect();
                println!(
                    "  lost to failover: {} answered wins not in the ledger{}{}",
                    lost.len(),
                    if lost.is_empty() { "" } else { ": " },
                    shown.join(", ")
                );
                totals.lost_to_failover += lost.len() as u64;
            }
            Err(e) => println!("  lost to failover: cannot read the ledger: {e:#}"),
        }
    }
    let won = report.outcomes.get("won").copied().unwrap_or(0);
    let orders = report.verification.as_ref().map_or(0, |v| v.orders as u64);
    let n503 = report.non_2xx.get(&503).copied().unwrap_or(0);
    println!(
        "  claims {} (won {won}, 503 {n503} of which outcome unknown {}, no answer {}), \
         orders checked {orders}, events ok {}/{}",
        report.requests,
        report.unknown_outcomes,
        report.transport_errors,
        report.events.iter().filter(|e| e.ok).count(),
        report.events.len(),
    );
    totals.schedules += 1;
    totals.claims += report.requests;
    totals.won += won;
    totals.answers_503 += n503;
    totals.outcome_unknown += report.unknown_outcomes;
    totals.no_answer += report.transport_errors;
    totals.orders_checked += orders;
    if !findings.is_empty() {
        keep_logs(&cluster);
    }
    Ok(findings)
}

/// Copies the processes' logs out of the schedule's directory and says where.
fn keep_logs(cluster: &Cluster) {
    match cluster.keep_logs() {
        Ok(dir) => println!("  the processes' logs are kept in {}", dir.display()),
        Err(e) => println!("  the processes' logs could not be kept: {e:#}"),
    }
}

/// The bench run of a schedule: a mixed storm on a campaign of its own.
fn bench_opts(s: &Schedule, urls: &str, connections: usize) -> BenchOpts {
    let mut o = BenchOpts::new(urls, cluster::ADMIN_TOKEN, ScenarioName::Seed002);
    if s.codes {
        o.codes = Some(s.stock);
        o.limit = Some(1);
        o.qty = Some(QtyRange { min: 1, max: 1 });
    } else {
        o.stock = Some(s.stock);
        o.limit = Some(2);
        o.qty = Some(QtyRange { min: 1, max: 2 });
    }
    o.users = Some(s.users);
    o.hold_seconds = s.hold_seconds;
    o.confirm_probability = 0.6;
    o.pick = Some(Pick::Uniform);
    o.clicks = Some(2);
    o.idempotency = true;
    o.connections = Some(connections);
    o.duration = Some(s.storm);
    o.events = s.events.clone();
    // A frozen server's claims give up after this and count as "maybe won".
    o.timeout = Duration::from_secs(5);
    o.drain_timeout = Duration::from_secs(90);
    o.seed = s.seed ^ s.index;
    o
}
