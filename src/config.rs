//! Typed settings of `seckill serve`, from flags or their `SECKILL_*` environment variables.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::guard::args::GuardArgs;
use crate::guard::secret::Secret;

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
    /// Address to listen on.
    #[arg(long, env = "SECKILL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Data directory of the embedded deployment (SQLite ledger, generated admin token).
    #[arg(long, env = "SECKILL_DATA", default_value = "./seckill-data")]
    pub data: PathBuf,

    /// Bearer token of the admin routes. If unset, one is generated on first start, printed
    /// once and kept in <data>/admin-token.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<Secret>,

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

    /// Largest body of campaign creation and restock, in bytes.
    #[arg(long, env = "SECKILL_MAX_ADMIN_BODY", default_value_t = 256 * 1024 * 1024)]
    pub max_admin_body: usize,

    /// Log as JSON lines instead of text.
    #[arg(long, env = "SECKILL_LOG_JSON")]
    pub log_json: bool,

    /// Rate limits, admission gate, shedding, client IP, signed identity.
    #[command(flatten)]
    pub guard: GuardArgs,
}

impl ServeConfig {
    /// Settings for an embedded server in `data` listening on a free loopback port.
    pub fn ephemeral(data: PathBuf, admin_token: &str) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data,
            admin_token: Some(Secret::new(admin_token)),
            admin_listen: None,
            sync: SyncMode::Full,
            max_batch: 4096,
            idempotency_hours: 24,
            max_admin_body: 256 * 1024 * 1024,
            log_json: false,
            guard: GuardArgs::default(),
        }
    }
}

impl ServeConfig {
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
