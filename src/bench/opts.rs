//! Command-line options of `seckill bench` and the small value parsers they need.
//!
//! Every workload knob is optional here: a `--scenario` preset fills in what the user left out
//! (see [`super::scenario`]), so `--scenario seed002 -c 200` means "seed 002, but 200
//! connections" without restating the rest.

use std::str::FromStr;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::event_spec::EventSpec;

/// The named workloads of `--scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScenarioName {
    /// Seed 000: 10 coupons, 100 users, 20 at a time.
    Seed000,
    /// Seed 002: 1,000 tickets, 100,000 users, at most 2 each, 1 or 2 per claim.
    Seed002,
    /// A pool of unique prize codes; repeat clickers.
    Prizes,
    /// One campaign with huge stock: every claim wins, maximum throughput.
    Hot,
    /// The stock is gone before the storm starts: measures the rejection path.
    Soldout,
    /// Orders wait for payment (`hold_seconds`): winners confirm with a probability after a
    /// random delay, the rest expire and their units sell again (docs/HOLDS.md).
    Holds,
    /// A sale opening behind a waiting room: users join before and after `starts_at`, poll
    /// their place with backoff and claim with their ticket once admitted; the verifier adds
    /// the room's promises (docs/WAITING_ROOM.md).
    Opening,
}

impl ScenarioName {
    pub fn as_str(self) -> &'static str {
        match self {
            ScenarioName::Seed000 => "seed000",
            ScenarioName::Seed002 => "seed002",
            ScenarioName::Prizes => "prizes",
            ScenarioName::Hot => "hot",
            ScenarioName::Soldout => "soldout",
            ScenarioName::Holds => "holds",
            ScenarioName::Opening => "opening",
        }
    }
}

/// How each shot picks its user among `--users`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pick {
    /// Users in turn: u1, u2, …, uN, then u1 again.
    Once,
    /// Uniformly at random, with replacement (some users come back).
    Uniform,
}

/// `--qty 2` or `--qty 1-2` (uniform in the range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QtyRange {
    pub min: u64,
    pub max: u64,
}

impl FromStr for QtyRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("{t:?} is not a quantity"))
        };
        let (min, max) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(s)?, num(s)?),
        };
        if min == 0 || max < min {
            return Err(format!("qty range {s:?} must be N or A-B with 1 <= A <= B"));
        }
        Ok(QtyRange { min, max })
    }
}

impl std::fmt::Display for QtyRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct BenchOpts {
    /// Base URL of the running deployment; several instances of one deployment as a
    /// comma-separated list (claims spread over all, admin calls and reads go to the first).
    #[arg(long, env = "SECKILL_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,

    /// Bearer token of the admin routes (campaign creation, orders, events).
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Workload preset; the flags below override its values.
    #[arg(long, value_enum, default_value = "seed000")]
    pub scenario: ScenarioName,

    /// Storm this existing campaign instead of creating one.
    #[arg(long, conflicts_with_all = ["stock", "codes", "limit"])]
    pub campaign: Option<String>,

    /// Create a stock campaign with this many units.
    #[arg(long, conflicts_with = "codes")]
    pub stock: Option<u64>,

    /// Create a code campaign with this many generated unique codes.
    #[arg(long)]
    pub codes: Option<u64>,

    /// Per-user limit of the created campaign.
    #[arg(long)]
    pub limit: Option<u64>,

    /// Create the campaign with holds of this many seconds (preset `holds`: 3).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub hold_seconds: Option<u32>,

    /// With holds: the share of winners that confirm (pay), each after a random delay of up
    /// to 1.5 × hold_seconds, so some confirms come too late and are refused.
    #[arg(long, default_value_t = 0.5)]
    pub confirm_probability: f64,

    /// `opening`: the room's admissions per second (default 500).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub admit_per_second: Option<u32>,

    /// `opening`: how long before `starts_at` the campaign is created and the pre-queue joins
    /// (default 3s); the later joiners come over as long again after the start.
    #[arg(long, value_parser = crate::duration::parse)]
    pub prequeue: Option<Duration>,

    /// Units per claim: `N`, or `A-B` drawn uniformly.
    #[arg(long)]
    pub qty: Option<QtyRange>,

    /// Distinct users simulated (names `u1` … `uN`, generated on the fly).
    #[arg(long)]
    pub users: Option<u64>,

    /// How a shot picks its user.
    #[arg(long, value_enum)]
    pub pick: Option<Pick>,

    /// Repeat clickers: each picked user fires this many claims back to back, in flight at once.
    #[arg(long)]
    pub clicks: Option<u64>,

    /// Send an Idempotency-Key; a user's repeated clicks share one key (a retried button).
    #[arg(long)]
    pub idempotency: bool,

    /// Concurrent HTTP/1.1 keep-alive connections.
    #[arg(long, short = 'c')]
    pub connections: Option<usize>,

    /// Total claims to send.
    #[arg(long, short = 'n', conflicts_with = "duration")]
    pub requests: Option<u64>,

    /// Send claims for this long instead of a fixed number (`10s`, `1m`).
    #[arg(long, short = 'z', value_parser = crate::duration::parse)]
    pub duration: Option<Duration>,

    /// Constant request rate (claims/s over all connections); latency then counts from each
    /// claim's scheduled send time. Without it the storm is closed-loop and the histogram is
    /// corrected for coordinated omission.
    #[arg(long)]
    pub rate: Option<f64>,

    /// An admin event during the storm: `WHEN:ACTION` with WHEN `2s` (since start) or `50%`
    /// (of the requests or duration) and ACTION `pause`, `resume`, `close`, `restock=N`,
    /// `cancel=N` (N orders won so far). Repeatable.
    #[arg(long = "event")]
    pub events: Vec<EventSpec>,

    /// Print the report as one JSON document.
    #[arg(long)]
    pub json: bool,

    /// Also write the report as one self-contained HTML page (latency percentile plot,
    /// throughput over time, outcome split, verification) to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,

    /// Skip the verification (only measure).
    #[arg(long)]
    pub no_verify: bool,

    /// Longest wait for the pipeline to drain before verifying.
    #[arg(long, value_parser = crate::duration::parse, default_value = "30s")]
    pub drain_timeout: Duration,

    /// Pause between two reads of the ledger while draining.
    #[arg(long, value_parser = crate::duration::parse, default_value = "250ms")]
    pub drain_interval: Duration,

    /// Timeout of one claim request.
    #[arg(long, value_parser = crate::duration::parse, default_value = "30s")]
    pub timeout: Duration,

    /// Worker threads of the load generator (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Process id of the server, when it runs on this machine: the report then gives the CPU
    /// it spent per claim during the storm (Linux, from /proc; for benchmark scripts).
    #[arg(long)]
    pub server_pid: Option<u32>,

    /// Seed of the random picks (users, quantities), for reproducible runs.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Progress line on stderr: `auto` (when stderr is a terminal), `always`, `never`.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: Progress,

    /// `opening` run by the fault campaign: units a fault gave back after a `sold_out` are
    /// never claimed again (each user claims once and leaves on `sold_out`), so an under-sell
    /// is not held against the room there; the storm's repeat clickers check it.
    #[arg(skip)]
    pub single_pass: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Progress {
    Auto,
    Always,
    Never,
}

impl BenchOpts {
    /// Options with every default, as the command line gives them, for a deployment at `url`.
    pub fn new(url: &str, admin_token: &str, scenario: ScenarioName) -> Self {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            opts: BenchOpts,
        }
        let mut opts = <Only as clap::Parser>::parse_from(["bench"]).opts;
        opts.url = url.to_owned();
        opts.admin_token = Some(admin_token.to_owned());
        opts.scenario = scenario;
        opts.progress = Progress::Never;
        opts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges() {
        assert_eq!("1-2".parse(), Ok(QtyRange { min: 1, max: 2 }));
        assert_eq!("3".parse(), Ok(QtyRange { min: 3, max: 3 }));
        assert!("0".parse::<QtyRange>().is_err());
        assert!("2-1".parse::<QtyRange>().is_err());
    }
}
