//! `seckill lock bench`: acquire + release cycles against one lock store, to compare stores
//! in one run (`scripts/lock_bench.sh` runs every backend back to back).
//!
//! `-c` workers each loop acquire → release on a name of their own (no contention: this
//! measures the store's cost per operation, not queueing), for `-n` cycles in all. Reported:
//! cycles per second, acquire and release latency (HDR histogram, µs), and this process's CPU
//! time per cycle (the client side only; a store's server CPU is not in it).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use parking_lot::Mutex;

use super::lock_target::LockTarget;
use crate::lock::Attempt;

#[derive(Debug, Args)]
pub struct BenchOpts {
    #[command(flatten)]
    pub target: LockTarget,
    /// Acquire + release cycles in all.
    #[arg(short = 'n', long, default_value_t = 2000)]
    pub cycles: u64,
    /// Concurrent workers, each on its own lock name.
    #[arg(short = 'c', long, default_value_t = 8)]
    pub concurrency: u64,
    /// Lease TTL of each grant.
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse)]
    pub ttl: Duration,
    /// One JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass; nothing else is touched.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub async fn run(opts: BenchOpts) -> anyhow::Result<ExitCode> {
    let locks = opts.target.open().await?;
    let hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let acquire = Arc::new(Mutex::new(hist()));
    let release = Arc::new(Mutex::new(hist()));
    let workers = opts.concurrency.max(1);
    let per = opts.cycles.div_ceil(workers);
    let run_id = hex::encode(rand::random::<[u8; 4]>());
    let cpu0 = cpu_time();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (locks, acquire, release) = (locks.clone(), acquire.clone(), release.clone());
        let name = format!("bench-{run_id}-{w}");
        let ttl = opts.ttl;
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let t = Instant::now();
                let lease = match locks.acquire(&name, "bench", ttl, Duration::ZERO).await? {
                    Attempt::Granted(l) => l,
                    Attempt::Held { .. } => anyhow::bail!("{name} held: another bench runs?"),
                };
                let a = t.elapsed();
                let t = Instant::now();
                locks.release(&name, &lease.token).await?;
                let r = t.elapsed();
                acquire.lock().saturating_record(a.as_micros() as u64);
                release.lock().saturating_record(r.as_micros() as u64);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = start.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    let cycles = per * workers;
    let (a, r) = (acquire.lock().clone(), release.lock().clone());
    let rate = cycles as f64 / elapsed.as_secs_f64();
    let cpu_us = cpu.as_micros() as f64 / cycles as f64;
    if opts.json {
        let v = serde_json::json!({
            "store": locks.kind(), "cycles": cycles, "concurrency": workers,
            "cycles_per_sec": rate, "client_cpu_us_per_cycle": cpu_us,
            "acquire_us": {"p50": a.value_at_quantile(0.5), "p99": a.value_at_quantile(0.99), "max": a.max()},
            "release_us": {"p50": r.value_at_quantile(0.5), "p99": r.value_at_quantile(0.99), "max": r.max()},
        });
        println!("{v}");
    } else {
        println!(
            "{:<9} {cycles} cycles, c={workers}: {rate:.0} acquire+release/s; acquire p50 {} µs p99 {} µs; release p50 {} µs p99 {} µs; client CPU {cpu_us:.0} µs/cycle",
            locks.kind(),
            a.value_at_quantile(0.5),
            a.value_at_quantile(0.99),
            r.value_at_quantile(0.5),
            r.value_at_quantile(0.99),
        );
    }
    Ok(ExitCode::SUCCESS)
}
