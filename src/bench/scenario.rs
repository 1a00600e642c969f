//! Scenario presets and the resolved plan of one bench run.
//!
//! A preset is a complete workload (the sales the seeds describe, plus the two throughput
//! extremes `hot` and `soldout`); command-line flags override single fields. Resolving once,
//! up front, gives the rest of the bench one plain struct to read and the report one place to
//! say exactly what ran.

use std::time::Duration;

use serde::Serialize;

use super::event_spec::EventSpec;
use super::opts::{BenchOpts, Pick, QtyRange, ScenarioName};

/// What the bench sells when it creates its own campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Supply {
    Stock(u64),
    Codes(u64),
}

/// When the storm stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    Requests(u64),
    #[serde(serialize_with = "secs")]
    Duration(Duration),
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The campaign a run storms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Created by the bench: its ledger holds nothing but this run's orders.
    Create { supply: Supply, per_user_limit: u64 },
    /// An existing campaign; orders that predate the run are left out of the answer checks.
    Existing { id: String },
}

/// Everything one run does, resolved from a preset and the flags.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub scenario: ScenarioName,
    pub target: Target,
    /// Claim the whole stock before the storm (the `soldout` preset), so the storm only meets
    /// the rejection path.
    pub presell: bool,
    pub qty: QtyRange,
    pub users: u64,
    pub pick: Pick,
    pub clicks: u64,
    pub idempotency: bool,
    pub connections: usize,
    pub stop: Stop,
    pub rate: Option<f64>,
    pub events: Vec<EventSpec>,
    pub seed: u64,
    /// The created campaign's orders wait for payment.
    pub hold: Option<Hold>,
    #[serde(skip)]
    pub timeout: Duration,
}

/// Holds of a created campaign and how its winners pay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hold {
    pub seconds: u32,
    pub confirm_probability: f64,
}

struct Preset {
    supply: Supply,
    limit: u64,
    qty: QtyRange,
    users: u64,
    pick: Pick,
    clicks: u64,
    connections: usize,
    stop: Stop,
    presell: bool,
}

fn preset(name: ScenarioName) -> Preset {
    let one = QtyRange { min: 1, max: 1 };
    match name {
        ScenarioName::Seed000 => Preset {
            supply: Supply::Stock(10),
            limit: 1,
            qty: one,
            users: 100,
            pick: Pick::Once,
            clicks: 1,
            connections: 20,
            stop: Stop::Requests(100),
            presell: false,
        },
        ScenarioName::Seed002 => Preset {
            supply: Supply::Stock(1_000),
            limit: 2,
            qty: QtyRange { min: 1, max: 2 },
            users: 100_000,
            pick: Pick::Once,
            clicks: 1,
            connections: 50,
            stop: Stop::Requests(100_000),
            presell: false,
        },
        ScenarioName::Prizes => Preset {
            supply: Supply::Codes(10_000),
            limit: 1,
            qty: one,
            users: 50_000,
            pick: Pick::Once,
            clicks: 2,
            connections: 50,
            stop: Stop::Requests(100_000),
            presell: false,
        },
        ScenarioName::Hot => Preset {
            supply: Supply::Stock(1_000_000_000),
            limit: 1,
            qty: one,
            users: 1_000_000_000,
            pick: Pick::Once,
            clicks: 1,
            connections: 128,
            stop: Stop::Duration(Duration::from_secs(10)),
            presell: false,
        },
        ScenarioName::Soldout => Preset {
            supply: Supply::Stock(100),
            limit: 1,
            qty: one,
            users: 1_000_000_000,
            pick: Pick::Once,
            clicks: 1,
            connections: 128,
            stop: Stop::Duration(Duration::from_secs(10)),
            presell: true,
        },
        // Runs through `bench::opening`, which reads the flags itself; this preset only keeps
        // `Plan::resolve` total.
        ScenarioName::Holds | ScenarioName::Opening => Preset {
            supply: Supply::Stock(2_000),
            limit: 1,
            qty: one,
            users: 1_000_000_000,
            pick: Pick::Once,
            clicks: 1,
            connections: 32,
            stop: Stop::Duration(Duration::from_secs(10)),
            presell: false,
        },
    }
}

impl Plan {
    pub fn resolve(o: &BenchOpts) -> anyhow::Result<Plan> {
        let p = preset(o.scenario);
        let target = match &o.campaign {
            Some(id) => Target::Existing { id: id.clone() },
            None => Target::Create {
                supply: match (o.stock, o.codes) {
                    (Some(n), _) => Supply::Stock(n),
                    (_, Some(n)) => Supply::Codes(n),
                    _ => p.supply,
                },
                per_user_limit: o.limit.unwrap_or(p.limit),
            },
        };
        let stop = match (o.requests, o.duration) {
            (Some(n), _) => Stop::Requests(n),
            (_, Some(d)) => Stop::Duration(d),
            _ => p.stop,
        };
        let plan = Plan {
            scenario: o.scenario,
            presell: p.presell && o.campaign.is_none(),
            target,
            qty: o.qty.unwrap_or(p.qty),
            users: o.users.unwrap_or(p.users),
            pick: o.pick.unwrap_or(p.pick),
            clicks: o.clicks.unwrap_or(p.clicks),
            idempotency: o.idempotency,
            connections: o.connections.unwrap_or(p.connections),
            stop,
            rate: o.rate,
            events: o.events.clone(),
            seed: o.seed,
            hold: match (o.hold_seconds, o.scenario) {
                _ if o.campaign.is_some() => None,
                (Some(seconds), _) => Some(Hold {
                    seconds,
                    confirm_probability: o.confirm_probability,
                }),
                (None, ScenarioName::Holds) => Some(Hold {
                    seconds: 3,
                    confirm_probability: o.confirm_probability,
                }),
                (None, _) => None,
            },
            timeout: o.timeout,
        };
        anyhow::ensure!(
            (0.0..=1.0).contains(&o.confirm_probability),
            "--confirm-probability must be between 0 and 1"
        );
        anyhow::ensure!(plan.users >= 1, "--users must be at least 1");
        anyhow::ensure!(plan.clicks >= 1, "--clicks must be at least 1");
        anyhow::ensure!(plan.connections >= 1, "--connections must be at least 1");
        if let Some(r) = plan.rate {
            anyhow::ensure!(
                r.is_finite() && r > 0.0,
                "--rate must be a positive number of claims per second"
            );
        }
        if let Stop::Requests(n) = plan.stop {
            anyhow::ensure!(n >= 1, "--requests must be at least 1");
        }
        Ok(plan)
    }

    /// A one-line description for the report header.
    pub fn describe(&self) -> String {
        let what = match &self.target {
            Target::Create {
                supply: Supply::Stock(n),
                per_user_limit,
            } => format!("{n} units, limit {per_user_limit}"),
            Target::Create {
                supply: Supply::Codes(n),
                per_user_limit,
            } => format!("{n} codes, limit {per_user_limit}"),
            Target::Existing { id } => format!("existing campaign {id}"),
        };
        let stop = match self.stop {
            Stop::Requests(n) => format!("{n} requests"),
            Stop::Duration(d) => format!("{:.1}s", d.as_secs_f64()),
        };
        let clicks = if self.clicks > 1 {
            format!(", {} clicks each", self.clicks)
        } else {
            String::new()
        };
        format!(
            "{}: {what}, {} users ({:?}{clicks}), qty {}, {} connections, {stop}{}",
            self.scenario.as_str(),
            self.users,
            self.pick,
            self.qty,
            self.connections,
            match self.rate {
                Some(r) => format!(", {r:.0} claims/s"),
                None => String::new(),
            }
        )
    }
}
