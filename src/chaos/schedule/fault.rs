//! What a schedule's faults are made of: the processes the nemesis can hit, what it does to
//! them, how long each kind holds, and which faults each deployment can suffer. Kept apart
//! from the generator (`super`), which decides how many, in which order, from which seed.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use serde::Serialize;

use super::Deployment;

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
    /// Scale-out: Redis's data set, snapshotted and later restored (with the worker killed).
    Snapshot,
    /// Embedded: the server's wall clock (libfaketime).
    Clock,
    /// Cluster: whichever master serves the campaign's slot when the fault lands.
    Master,
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
            "redis-snapshot" => Target::Snapshot,
            "server-clock" => Target::Clock,
            "redis-master" => Target::Master,
            _ => {
                return Err(format!(
                    "unknown process {s:?} (instance-0, instance-1, worker, redis-server, \
                     postgres, data-disk, redis-link, redis-primary, redis-replica, \
                     redis-snapshot, server-clock, redis-master)"
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
            Target::Snapshot => f.write_str("redis-snapshot"),
            Target::Clock => f.write_str("server-clock"),
            Target::Master => f.write_str("redis-master"),
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
    /// The link loses the packets the instance sends to Redis: retransmitted, the bytes arrive
    /// in order when the fault ends.
    DropUp,
    /// The link loses the packets Redis sends to the instance, likewise.
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
    /// A snapshot of Redis now; after the fault's duration redis-server and the worker are
    /// killed -9 at once and Redis restarts from that snapshot (`super::super::rewind`).
    Rewind,
    /// The wall clock steps by this many seconds (negative: back) for the fault's duration,
    /// then back to the real time (`super::super::clock`).
    ClockStep(i32),
    /// `CLUSTER FAILOVER` on the replica: the master hands over to it (graceful).
    Handover,
    /// Cluster: the master's replica frozen, this many ms later the master killed -9 and the
    /// replica thawed, so that the replica promoted misses the master's last writes.
    KillLagging(u32),
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
            Kind::Rewind => "snapshot",
            Kind::ClockStep(_) => "clock step",
            Kind::Handover => "CLUSTER FAILOVER",
            Kind::KillLagging(_) => "lagging kill -9",
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
            Kind::Kill | Kind::KillLagging(_) => "restart after",
            Kind::Freeze => "SIGCONT after",
            Kind::Reset | Kind::Failover | Kind::Handover => "then",
            Kind::Rewind => "then kill -9 redis-server and the worker and restore it after",
            Kind::ClockStep(by) => {
                return write!(
                    f,
                    "{:>6.2}s  {} {} by {by:+}s, back after {:.2}s",
                    self.at.as_secs_f64(),
                    self.kind,
                    self.target,
                    self.hold.as_secs_f64()
                )
            }
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

/// When a fault of `kind` lands and how long it holds, inside a fault window ending `end`
/// seconds into the storm.
pub(super) fn draw(r: &mut StdRng, target: Target, kind: Kind, end: f64) -> Fault {
    let kind = match kind {
        Kind::KillLagging(_) => Kind::KillLagging(r.gen_range(100..=800)),
        k => k,
    };
    let hold = match kind {
        // Longer than the sentinels' down-after (1 s) plus their election: the replica is
        // promoted before the killed primary comes back as a replica.
        Kind::Kill if matches!(target, Target::Primary | Target::Master) => r.gen_range(2.5..5.0),
        Kind::KillLagging(_) => r.gen_range(2.5..5.0),
        Kind::Kill => r.gen_range(0.0..3.0),
        Kind::Freeze => r.gen_range(3.0..8.0),
        Kind::DiskFull | Kind::IoError => r.gen_range(1.0..5.0),
        Kind::Outage => 30.0,
        Kind::Partition | Kind::DropUp | Kind::DropDown => r.gen_range(1.0..5.0),
        Kind::Latency => r.gen_range(2.0..6.0),
        Kind::Reset | Kind::Failover | Kind::Handover => 0.0,
        Kind::Rewind => r.gen_range(1.0..4.0),
        Kind::ClockStep(_) => r.gen_range(1.0..5.0),
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

/// The faults a deployment can suffer.
pub(super) fn kinds(deployment: Deployment, long_outage: bool) -> Vec<(Target, Kind)> {
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
        // The same for a Cluster's masters, and PostgreSQL and a frozen worker besides.
        Deployment::Cluster => vec![
            (Target::Master, Kind::Kill),
            (Target::Master, Kind::KillLagging(0)),
            (Target::Master, Kind::Handover),
            (Target::Instance(0), Kind::Kill),
            (Target::Instance(1), Kind::Kill),
            (Target::Worker, Kind::Kill),
            (Target::Worker, Kind::Freeze),
            (Target::Postgres, Kind::Kill),
        ],
    }
}
