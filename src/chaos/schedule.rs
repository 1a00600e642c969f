//! A fault schedule: a seed turned into a timed list of faults and admin events.
//!
//! Everything random in a campaign comes from one seed, printed first, so a failing schedule
//! is replayed with `seckill chaos --seed S --schedules 1 --first N`: schedule `n` of seed `S`
//! draws from its own generator seeded with `S` and `n`, whatever ran before it. Faults of one
//! schedule may overlap when they hit different processes (Redis dies while the worker is
//! frozen); faults on one process are applied one after the other by the nemesis.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::bench::events::{Action, EventSpec, When};

/// Which deployment a schedule runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Deployment {
    /// One `seckill serve` on a SQLite data directory.
    Embedded,
    /// Two instances and a worker on one Redis (AOF) and a PostgreSQL ledger.
    ScaleOut,
    /// The same behind Redis Sentinel: a primary, one or two replicas (all AOF; the schedule
    /// draws how many), three sentinels.
    Sentinel,
}

/// A process the nemesis can hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// `seckill serve` instance 0 (the embedded server, or scale-out instance A) or 1.
    Instance(u8),
    Worker,
    Redis,
    Postgres,
    /// The embedded data directory's filesystem.
    Disk,
    /// Scale-out: the network between instance 0 and Redis (through the fault proxy).
    Link,
    /// Sentinel: whichever Redis node is the primary when the fault lands.
    Primary,
    /// Sentinel: whichever Redis node is the lowest-numbered replica when the fault lands.
    Replica,
    /// Sentinel: Redis node 0, 1 or 2 (each the primary or a replica, as failovers left them).
    Node(u8),
    /// Sentinel: one of the three sentinels (supervised, never faulted).
    Sentinel(u8),
}

impl std::str::FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "instance-0" => Target::Instance(0),
            "instance-1" => Target::Instance(1),
            "worker" => Target::Worker,
            "redis-server" => Target::Redis,
            "postgres" => Target::Postgres,
            "data-disk" => Target::Disk,
            "redis-link" => Target::Link,
            "redis-primary" => Target::Primary,
            "redis-replica" => Target::Replica,
            _ => {
                return Err(format!(
                    "unknown process {s:?} (instance-0, instance-1, worker, redis-server, \
                     postgres, data-disk, redis-link, redis-primary, redis-replica)"
                ))
            }
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Instance(i) => write!(f, "instance-{i}"),
            Target::Worker => f.write_str("worker"),
            Target::Redis => f.write_str("redis-server"),
            Target::Postgres => f.write_str("postgres"),
            Target::Disk => f.write_str("data-disk"),
            Target::Link => f.write_str("redis-link"),
            Target::Primary => f.write_str("redis-primary"),
            Target::Replica => f.write_str("redis-replica"),
            Target::Node(i) => write!(f, "redis-{i}"),
            Target::Sentinel(i) => write!(f, "sentinel-{i}"),
        }
    }
}

/// What is done to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// SIGKILL, then a restart after the fault's duration.
    Kill,
    /// SIGSTOP for the fault's duration, then SIGCONT.
    Freeze,
    /// The data directory's disk is full for the fault's duration.
    DiskFull,
    /// PostgreSQL is down (fast shutdown) for 30 s, orders piling up in the stream.
    Outage,
    /// The link holds every byte both ways and accepts no connection (a silent partition).
    /// On a Redis replica: its replication link is cut again and again for the fault's
    /// duration (`CLIENT KILL TYPE master` on the replica every 100 ms).
    Partition,
    /// The link discards what the instance sends to Redis.
    DropUp,
    /// The link discards what Redis sends to the instance.
    DropDown,
    /// The link delays every chunk 50–300 ms each way.
    Latency,
    /// The link closes every connection at once.
    Reset,
    /// `SENTINEL FAILOVER`: the primary hands over to the replica (graceful).
    Failover,
    /// Every ledger commit ends in a disk I/O error (a failed fsync) for the fault's
    /// duration: half of them committed, half rolled back.
    IoError,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Kill => "kill -9",
            Kind::Freeze => "SIGSTOP",
            Kind::DiskFull => "disk full",
            Kind::Outage => "unreachable",
            Kind::Partition => "partition",
            Kind::DropUp => "drop instance->redis",
            Kind::DropDown => "drop redis->instance",
            Kind::Latency => "latency 50-300ms",
            Kind::Reset => "reset",
            Kind::Failover => "SENTINEL FAILOVER",
            Kind::IoError => "fsync error",
        })
    }
}

/// One fault: at `at` into the storm, `kind` hits `target` for `hold`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fault {
    pub at: Duration,
    pub target: Target,
    pub kind: Kind,
    pub hold: Duration,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.kind {
            Kind::Kill => "restart after",
            Kind::Freeze => "SIGCONT after",
            Kind::Reset | Kind::Failover => "then",
            _ => "for",
        };
        write!(
            f,
            "{:>6.2}s  {} {}, {verb} {:.2}s",
            self.at.as_secs_f64(),
            self.kind,
            self.target,
            self.hold.as_secs_f64()
        )
    }
}

/// The workload of one schedule (a `seckill bench` run) and its faults.
#[derive(Debug, Clone, Serialize)]
pub struct Schedule {
    pub seed: u64,
    pub index: u64,
    pub deployment: Deployment,
    pub storm: Duration,
    /// Code campaign (unique codes) rather than plain units.
    pub codes: bool,
    pub stock: u64,
    pub users: u64,
    /// Orders are held this many seconds for a payment (payers confirm some of them, many
    /// near the deadline); `None`: orders are final when won.
    pub hold_seconds: Option<u32>,
    /// Lock clients run beside the storm ([`super::locks`]).
    pub locks: bool,
    /// Sentinel: how many replicas the primary has (1 or 2); 0 elsewhere.
    pub replicas: u8,
    pub events: Vec<EventSpec>,
    pub faults: Vec<Fault>,
    pub long_outage: bool,
    pub only: Option<Target>,
}

/// Knobs of the generator.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub storm: Duration,
    pub faults: usize,
    /// Allow the 30-second PostgreSQL outage (needs a storm of at least 40 s).
    pub long_outage: bool,
    /// Only faults on this process (`instance-0`, `worker`, `redis-server`, …).
    pub only: Option<Target>,
}

/// The generator of schedule `index` of campaign `seed`.
fn rng(seed: u64, index: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

impl Schedule {
    pub fn generate(seed: u64, index: u64, deployment: Deployment, shape: Shape) -> Schedule {
        let mut r = rng(seed, index);
        let storm = shape.storm;
        let secs = storm.as_secs_f64();
        let codes = r.gen_bool(0.3);
        let stock = r.gen_range(200..=2_000);
        let users = stock * r.gen_range(2..=6);
        let mut events = Vec::new();
        let frac = |r: &mut StdRng, lo: f64, hi: f64| r.gen_range(lo..hi) * secs;
        for _ in 0..r.gen_range(0..=2) {
            let at = frac(&mut r, 0.1, 0.7);
            events.push(ev(at, Action::Restock(r.gen_range(20..=stock / 2))));
        }
        if r.gen_bool(0.5) {
            let at = frac(&mut r, 0.1, 0.6);
            events.push(ev(at, Action::Pause));
            events.push(ev(at + r.gen_range(0.3..2.0), Action::Resume));
        }
        for _ in 0..r.gen_range(0..=2) {
            let at = frac(&mut r, 0.2, 0.8);
            events.push(ev(at, Action::Cancel(r.gen_range(1..=20))));
        }
        events.sort_by(|a, b| at_of(a).total_cmp(&at_of(b)));
        // Drawn from a generator of their own, so the faults of a seed stay what they were
        // before holds and locks joined the workload.
        let mut extra = rng(seed ^ 0x401d_5eed, index);
        let hold_seconds = extra.gen_bool(0.5).then(|| extra.gen_range(2..=4));
        let locks = extra.gen_bool(0.75);
        let replicas = match deployment {
            Deployment::Sentinel => extra.gen_range(1..=2),
            _ => 0,
        };

        let mut menu = kinds(deployment, shape.long_outage && secs >= 40.0);
        if let Some(only) = shape.only {
            menu.retain(|(t, _)| *t == only);
        }
        // Every fault is over (restarted, thawed, freed) by 80% of the storm, so the last
        // fifth runs healthy and the drain starts on a whole deployment.
        let end = secs * 0.8;
        let mut faults = Vec::with_capacity(shape.faults);
        for _ in 0..shape.faults * usize::from(!menu.is_empty()) {
            let (target, kind) = menu[r.gen_range(0..menu.len())];
            faults.push(draw(&mut r, target, kind, end));
        }
        // Faults on a replica come on top, from the second generator, so the Sentinel
        // schedules of a seed keep the faults they had before replicas were hit.
        if deployment == Deployment::Sentinel && shape.only.is_none_or(|t| t == Target::Replica) {
            for _ in 0..extra.gen_range(0..=2) {
                let kind = [Kind::Kill, Kind::Freeze, Kind::Partition][extra.gen_range(0..3)];
                faults.push(draw(&mut extra, Target::Replica, kind, end));
            }
        }
        faults.sort_by_key(|f| f.at);
        Schedule {
            seed,
            index,
            deployment,
            storm,
            codes,
            stock,
            users,
            hold_seconds,
            locks,
            replicas,
            events,
            faults,
            long_outage: shape.long_outage,
            only: shape.only,
        }
    }
}

/// When a fault of `kind` lands and how long it holds, inside a fault window ending `end`
/// seconds into the storm.
fn draw(r: &mut StdRng, target: Target, kind: Kind, end: f64) -> Fault {
    let hold = match kind {
        // Longer than the sentinels' down-after (1 s) plus their election: the replica is
        // promoted before the killed primary comes back as a replica.
        Kind::Kill if target == Target::Primary => r.gen_range(2.5..5.0),
        Kind::Kill => r.gen_range(0.0..3.0),
        Kind::Freeze => r.gen_range(3.0..8.0),
        Kind::DiskFull | Kind::IoError => r.gen_range(1.0..5.0),
        Kind::Outage => 30.0,
        Kind::Partition | Kind::DropUp | Kind::DropDown => r.gen_range(1.0..5.0),
        Kind::Latency => r.gen_range(2.0..6.0),
        Kind::Reset | Kind::Failover => 0.0,
    };
    let hold = f64::min(hold, end - 1.5).max(0.0);
    let at = r.gen_range(1.0..(end - hold).max(1.5));
    Fault {
        at: Duration::from_secs_f64(at),
        target,
        kind,
        hold: Duration::from_secs_f64(hold),
    }
}

fn ev(at: f64, action: Action) -> EventSpec {
    EventSpec {
        when: When::After((at * 100.0).round() / 100.0),
        action,
    }
}

fn at_of(e: &EventSpec) -> f64 {
    match e.when {
        When::After(s) => s,
        When::Fraction(f) => f,
    }
}

/// The faults a deployment can suffer.
fn kinds(deployment: Deployment, long_outage: bool) -> Vec<(Target, Kind)> {
    match deployment {
        Deployment::Embedded => vec![
            (Target::Instance(0), Kind::Kill),
            (Target::Instance(0), Kind::Freeze),
            (Target::Disk, Kind::DiskFull),
            (Target::Disk, Kind::IoError),
        ],
        Deployment::ScaleOut => {
            let mut v = vec![
                (Target::Instance(0), Kind::Kill),
                (Target::Instance(1), Kind::Kill),
                (Target::Instance(0), Kind::Freeze),
                (Target::Instance(1), Kind::Freeze),
                (Target::Worker, Kind::Kill),
                (Target::Worker, Kind::Freeze),
                (Target::Redis, Kind::Kill),
                (Target::Postgres, Kind::Kill),
                (Target::Link, Kind::Partition),
                (Target::Link, Kind::DropUp),
                (Target::Link, Kind::DropDown),
                (Target::Link, Kind::Latency),
                (Target::Link, Kind::Reset),
            ];
            if long_outage {
                v.push((Target::Postgres, Kind::Outage));
            }
            v
        }
        // Faults on the primary twice as likely as the others: failovers are what this
        // deployment is for.
        Deployment::Sentinel => vec![
            (Target::Primary, Kind::Kill),
            (Target::Primary, Kind::Kill),
            (Target::Primary, Kind::Failover),
            (Target::Primary, Kind::Failover),
            (Target::Instance(0), Kind::Kill),
            (Target::Instance(1), Kind::Kill),
            (Target::Worker, Kind::Kill),
        ],
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule {} of seed {} ({:?}): {:.0}s storm, {} {}, {} users, replay with \
             `seckill chaos --deployment {} --seed {} --first {} --schedules 1 --storm {}s \
             --faults {}{}{}`",
            self.index,
            self.seed,
            self.deployment,
            self.storm.as_secs_f64(),
            self.stock,
            if self.codes { "codes" } else { "units" },
            self.users,
            match self.deployment {
                Deployment::Embedded => "embedded",
                Deployment::ScaleOut => "scale-out",
                Deployment::Sentinel => "sentinel",
            },
            self.seed,
            self.index,
            self.storm.as_secs_f64(),
            // The faults on a replica come on top of `--faults`.
            self.faults
                .iter()
                .filter(|f| f.target != Target::Replica)
                .count(),
            if self.long_outage {
                " --long-outage"
            } else {
                ""
            },
            self.only
                .map(|t| format!(" --only {t}"))
                .unwrap_or_default()
        )?;
        if let Some(h) = self.hold_seconds {
            writeln!(
                f,
                "  orders held {h}s for a payment; payers confirm 60% of them"
            )?;
        }
        if self.locks {
            writeln!(f, "  lock clients beside the storm")?;
        }
        if self.replicas > 0 {
            writeln!(
                f,
                "  Redis: a primary and {} replica{}",
                self.replicas,
                if self.replicas > 1 { "s" } else { "" }
            )?;
        }
        for e in &self.events {
            writeln!(f, "  {:>6.2}s  event {:?}", at_of(e), e.action)?;
        }
        for fault in &self.faults {
            writeln!(f, "  {fault}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
