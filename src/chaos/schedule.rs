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

use super::opening::Plan;
use crate::bench::event_spec::{Action, EventSpec, When};

mod fault;

use fault::{draw, kinds};
pub use fault::{Fault, Kind, Target};

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
    /// The same on a three-master Redis Cluster, a replica per master (all AOF).
    Cluster,
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
    /// An opening behind a waiting room runs beside the storm ([`super::opening`]).
    pub opening: Option<Plan>,
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
        // A Redis restored from a snapshot comes on top too, so the scale-out schedules of a
        // seed keep their faults; drawn last from the second generator, after the replicas.
        if deployment == Deployment::ScaleOut
            && shape.only.is_none_or(|t| t == Target::Snapshot)
            && extra.gen_bool(0.5)
        {
            faults.push(draw(&mut extra, Target::Snapshot, Kind::Rewind, end));
        }
        // A step of the embedded server's clock, on top and last for the same reason.
        if deployment == Deployment::Embedded
            && shape.only.is_none_or(|t| t == Target::Clock)
            && extra.gen_bool(0.5)
        {
            let by = extra.gen_range(60..=300) * if extra.gen_bool(0.5) { 1 } else { -1 };
            faults.push(draw(&mut extra, Target::Clock, Kind::ClockStep(by), end));
        }
        faults.sort_by_key(|f| f.at);
        // The opening, from a third generator, so every seed keeps its faults and workload.
        // Not where Redis can go back in time (super::opening says why).
        let mut third = rng(seed ^ 0x0be1_5eed, index);
        let rewinds = faults.iter().any(|f| f.target == Target::Snapshot);
        let opening = (deployment != Deployment::Cluster && !rewinds && third.gen_bool(0.5))
            .then(|| Plan::new(third.gen_range(300..=800), secs));
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
            opening,
        }
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
                Deployment::Cluster => "cluster",
            },
            self.seed,
            self.index,
            self.storm.as_secs_f64(),
            // The faults on a replica, a snapshot restore and a clock step come on top of
            // `--faults`.
            self.faults
                .iter()
                .filter(|f| !matches!(f.target, Target::Replica | Target::Snapshot | Target::Clock))
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
        if let Some(o) = self.opening {
            writeln!(
                f,
                "  an opening beside the storm: {} users, a room admitting {} a second",
                o.users, o.admit_per_second
            )?;
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
