//! Typed settings of `seckill serve`, from flags or their `SECKILL_*` environment variables;
//! those of the scale-out deployment and of `seckill worker` are in `scale_out.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::guard::args::GuardArgs;
use crate::guard::secret::Secret;

mod delivery;
pub mod file;
mod scale_out;

pub use delivery::DeliveryArgs;

pub use scale_out::{ClaimBatchArgs, PipelineArgs, ScaleOutArgs, WorkerConfig};

/// Default of `--idempotency-max-per-user`: answers of keyed claims that changed nothing kept
/// per user and campaign (the bench verifier reads it too: beyond it a retry may differ).
pub const KEPT_REJECTIONS_PER_USER: u64 = 64;
/// Default of `--idempotency-max-rejected`: the same, per campaign.
pub const KEPT_REJECTIONS_PER_CAMPAIGN: u64 = 100_000;

/// When a commit counts as durable in the embedded ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncMode {
    /// fsync on every group commit: an answered `won` survives power loss.
    Full,
    /// WAL without fsync per commit: survives a process crash (kill -9), not power loss.
    Normal,
}

#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Settings file (TOML; the keys are these flags' names). Flags and SECKILL_* variables
    /// override it. Its `token` list is read again on SIGHUP and whenever the file changes.
    #[arg(long, env = "SECKILL_CONFIG")]
    pub config: Option<PathBuf>,

    /// Address to listen on.
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Data directory of the embedded deployment (SQLite ledger, generated admin token).
    #[arg(long, env = "SECKILL_DATA", default_value = "./seckill-data")]
    pub data: PathBuf,

    /// Bearer token of the admin routes. If unset, one is generated on first start, printed
    /// once and kept in `<data>/admin-token`.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<Secret>,

    /// A named credential: NAME:SCOPE[+SCOPE…]:SECRET, scopes admin (everything), confirm
    /// (confirming orders), read (views, feed, metrics, dashboard) and locks; SECRET (16+
    /// characters) may be given as `sha256:HEX` (its SHA-256). Repeatable; several may be
    /// valid at once, so one is rotated without downtime.
    #[arg(
        long = "token",
        env = "SECKILL_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub tokens: Vec<Secret>,

    /// Serve the admin routes (and /metrics) only on this address; they answer 404 on
    /// --listen. Unset: everything on --listen.
    #[arg(long, env = "SECKILL_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,

    /// Durability of embedded commits.
    #[arg(long, env = "SECKILL_SYNC", value_enum, default_value = "full")]
    pub sync: SyncMode,

    /// Most writes in one group commit.
    #[arg(long, env = "SECKILL_MAX_BATCH", default_value_t = 4096)]
    pub max_batch: usize,

    /// Hours an Idempotency-Key answer is kept (at least 24 per the API contract).
    #[arg(long, env = "SECKILL_IDEMPOTENCY_HOURS", default_value_t = 24, value_parser = clap::value_parser!(u64).range(24..))]
    pub idempotency_hours: u64,

    /// Seconds the answer of a claim that changed nothing (any outcome but won) is kept under
    /// its Idempotency-Key; a retry after that is processed afresh.
    #[arg(long, env = "SECKILL_IDEMPOTENCY_REJECTED_SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=7 * 24 * 3600))]
    pub idempotency_rejected_secs: u64,

    /// Most answers of claims that changed nothing kept per user and campaign; beyond it such
    /// claims are answered but not kept.
    #[arg(long, env = "SECKILL_IDEMPOTENCY_MAX_PER_USER", default_value_t = KEPT_REJECTIONS_PER_USER, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub idempotency_max_per_user: u64,

    /// Most answers of claims that changed nothing kept per campaign (all users together).
    #[arg(long, env = "SECKILL_IDEMPOTENCY_MAX_REJECTED", default_value_t = KEPT_REJECTIONS_PER_CAMPAIGN, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    pub idempotency_max_rejected: u64,

    /// How long the event feed (`GET /v1/events`) keeps an event; older ones are removed and a
    /// cursor before them answers 410.
    #[arg(long, env = "SECKILL_EVENTS_RETENTION", default_value = "7d", value_parser = crate::duration::parse)]
    pub events_retention: std::time::Duration,

    /// Largest body of campaign creation and restock, in bytes.
    #[arg(long, env = "SECKILL_MAX_ADMIN_BODY", default_value_t = 256 * 1024 * 1024)]
    pub max_admin_body: usize,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "SECKILL_LOG_JSON")]
    pub log_json: bool,

    /// Independent Redis masters (comma-separated, an odd number such as 3 or 5) that serve
    /// the /v1/locks routes with Redlock, instead of the deployment's own store.
    #[arg(
        long,
        env = "SECKILL_LOCK_REDIS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub lock_redis: Vec<String>,

    /// Serve every claim through the router instead of the listener's fast path (same
    /// answers; for comparing the two, see `http::fast`).
    #[arg(long, env = "SECKILL_NO_FAST_CLAIMS", hide = true)]
    pub no_fast_claims: bool,

    /// Connection limits against slow, stalled and greedy clients.
    #[command(flatten)]
    pub conn: ConnArgs,

    /// Event delivery: webhooks and NATS.
    #[command(flatten)]
    pub delivery: DeliveryArgs,

    /// Rate limits, admission gate, shedding, client IP, signed identity.
    #[command(flatten)]
    pub guard: GuardArgs,
    #[command(flatten)]
    pub scale: ScaleOutArgs,

    /// The clock of the embedded engine; `None` is the system clock. Not a flag: tests inject
    /// a [`ManualClock`](crate::clock::ManualClock) to reach payment deadlines without sleeping.
    #[arg(skip)]
    pub clock: Option<std::sync::Arc<dyn crate::clock::Clock>>,
}

impl ServeConfig {
    /// Settings for an embedded server in `data` listening on a free loopback port.
    pub fn ephemeral(data: PathBuf, admin_token: &str) -> Self {
        Self {
            config: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data,
            admin_token: Some(Secret::new(admin_token)),
            tokens: Vec::new(),
            admin_listen: None,
            sync: SyncMode::Full,
            max_batch: 4096,
            idempotency_hours: 24,
            events_retention: std::time::Duration::from_secs(7 * 86_400),
            idempotency_rejected_secs: 600,
            idempotency_max_per_user: KEPT_REJECTIONS_PER_USER,
            idempotency_max_rejected: KEPT_REJECTIONS_PER_CAMPAIGN,
            max_admin_body: 256 * 1024 * 1024,
            log_json: false,
            lock_redis: Vec::new(),
            no_fast_claims: false,
            conn: ConnArgs::default(),
            delivery: DeliveryArgs::default(),
            guard: GuardArgs::default(),
            scale: ScaleOutArgs::default(),
            clock: None,
        }
    }
}

impl ServeConfig {
    /// What is kept of the answers of claims that changed nothing (`engine::idempotency`).
    pub fn idem_limits(&self) -> crate::engine::IdemLimits {
        crate::engine::IdemLimits {
            rejected_ttl: chrono::Duration::seconds(self.idempotency_rejected_secs as i64),
            per_user: self.idempotency_max_per_user as usize,
            per_campaign: self.idempotency_max_rejected as usize,
        }
    }

    /// The settings `seckill` uses when run with no subcommand: defaults plus environment.
    pub fn parse_default() -> Self {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            cfg: ServeConfig,
        }
        <Only as clap::Parser>::parse_from(["seckill"]).cfg
    }
}

/// Limits of every client connection (see `crate::http::listener`).
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// Milliseconds a connection has to send a complete request head, from accept or from the
    /// first byte of its next request; then it is closed.
    #[arg(long, env = "SECKILL_HEAD_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub head_timeout_ms: u64,

    /// Milliseconds a keep-alive connection may wait for its next request; then it is closed.
    #[arg(long, env = "SECKILL_IDLE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,

    /// Milliseconds a request body has to arrive in full (every route, admin uploads
    /// included); then the request answers 408.
    #[arg(long, env = "SECKILL_BODY_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_ms: u64,

    /// Most open client connections of the public listener (lowered to fit the descriptor
    /// limit). At the cap, the oldest connection without a request in progress is closed to
    /// make room for a new one.
    #[arg(long, env = "SECKILL_MAX_CONNECTIONS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
}

impl Default for ConnArgs {
    fn default() -> Self {
        let d = crate::http::ConnLimits::default();
        Self {
            head_timeout_ms: d.head_timeout.as_millis() as u64,
            idle_timeout_ms: d.idle_timeout.as_millis() as u64,
            body_timeout_ms: d.body_timeout.as_millis() as u64,
            max_connections: d.max_connections as u64,
        }
    }
}

impl ConnArgs {
    pub fn limits(&self) -> crate::http::ConnLimits {
        use std::time::Duration;
        crate::http::ConnLimits {
            head_timeout: Duration::from_millis(self.head_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            body_timeout: Duration::from_millis(self.body_timeout_ms),
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            per_ip: None,
        }
    }
}
