//! The `seckill` command line: one subcommand per module.

mod baseline;
mod bench;
mod chaos;
mod demo;
mod events;
pub mod lock;
mod lock_bench;
mod lock_target;
mod receive;
mod serve;
mod sign_user;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "seckill",
    version,
    about = "Flash-sale engine: never oversell, never lose an acknowledged order"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the HTTP service (embedded deployment by default).
    #[command(args_override_self = true)]
    Serve(Box<crate::config::ServeConfig>),
    /// Run seed 000's scenario (10 coupons, 100 users, 20 at a time) against an in-process
    /// server and check its outcome.
    Demo(demo::DemoOpts),
    /// Print a signed identity token (X-Seckill-User) for a user: for trying a deployment
    /// that has --user-signing-key set.
    SignUser(sign_user::SignUserOpts),
    #[command(args_override_self = true)]
    /// Run only the scale-out order pipeline (Redis Streams → PostgreSQL), for deployments
    /// whose `serve` instances run with --no-worker.
    Worker(crate::config::WorkerConfig),
    /// Storm a running deployment, report throughput and latency, verify every invariant.
    Bench(Box<crate::bench::BenchOpts>),
    /// Locks with fencing tokens: `lock run NAME -- COMMAND…` runs a command while holding a
    /// lock; `lock bench` measures a lock store.
    #[command(subcommand)]
    Lock(lock::LockCommand),
    /// The event feed of a running seckill: `events tail` prints every order transition and
    /// campaign change as JSON lines and follows it.
    #[command(subcommand)]
    Events(events::EventsCommand),
    /// Run randomized fault schedules (kills, freezes, outages, a full disk) against real
    /// embedded and scale-out deployments under a mixed storm, and check every invariant.
    Chaos(Box<crate::chaos::ChaosOpts>),
    /// Serve a trivial handler: the HTTP ceiling `scripts/bench.sh` compares seckill with.
    #[command(hide = true)]
    Baseline(baseline::BaselineOpts),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.len() == 1 {
        argv.push("serve".into()); // `seckill` alone serves
    }
    let argv = match crate::config::file::expand(argv, &<Cli as clap::CommandFactory>::command()) {
        Ok(argv) => argv,
        Err(e) => {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{e:#}\n")).exit()
        }
    };
    let cli = Cli::parse_from(argv);
    let command = cli
        .command
        .unwrap_or_else(|| Command::Serve(Box::new(crate::config::ServeConfig::parse_default())));
    let json_logs = match &command {
        Command::Serve(c) => c.log_json,
        Command::Worker(c) => c.log_json,
        Command::Demo(_)
        | Command::SignUser(_)
        | Command::Bench(_)
        | Command::Lock(_)
        | Command::Events(_)
        | Command::Chaos(_)
        | Command::Baseline(_) => false,
    };
    crate::telemetry::init(json_logs);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Bench(opts) = &command {
        if let Some(n) = opts.threads {
            builder.worker_threads(n.max(1));
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            crate::telemetry::flush_logs();
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Serve(cfg) => serve::run(*cfg).await,
            Command::Demo(opts) => demo::run(opts).await,
            Command::SignUser(opts) => sign_user::run(opts),
            Command::Worker(cfg) => serve::run_worker(cfg).await,
            Command::Bench(opts) => bench::run(*opts).await,
            Command::Lock(cmd) => lock::run(cmd).await,
            Command::Events(cmd) => events::run(cmd).await,
            Command::Chaos(opts) => chaos::run(*opts).await,
            Command::Baseline(opts) => baseline::run(opts).await,
        }
    });
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    };
    drop(runtime);
    crate::telemetry::flush_logs();
    code
}

#[cfg(test)]
mod tests {
    #[test]
    fn command_line_definition_is_consistent() {
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn flags_and_lists_of_the_command_line_override_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seckill.toml");
        std::fs::write(
            &path,
            "max-batch = 64\nlisten = \"127.0.0.1:9000\"\nwebhook = [\"http://a/1\"]\n",
        )
        .unwrap();
        let argv: Vec<std::ffi::OsString> = [
            "seckill",
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--max-batch",
            "8",
            "--webhook",
            "http://a/2",
        ]
        .iter()
        .map(Into::into)
        .collect();
        let cmd = <super::Cli as clap::CommandFactory>::command();
        let argv = crate::config::file::expand(argv, &cmd).unwrap();
        let cli = <super::Cli as clap::Parser>::try_parse_from(argv).unwrap();
        let Some(super::Command::Serve(cfg)) = cli.command else {
            panic!("serve");
        };
        assert_eq!(cfg.max_batch, 8);
        assert_eq!(cfg.listen.port(), 9000);
        assert_eq!(cfg.delivery.webhooks, ["http://a/2"]);
    }

    #[test]
    fn a_replica_wait_longer_than_the_heartbeat_allows_is_refused() {
        let parse = |ms: &str| {
            <super::Cli as clap::Parser>::try_parse_from([
                "seckill",
                "serve",
                "--redis-wait-timeout-ms",
                ms,
            ])
        };
        assert!(parse("1000").is_ok());
        let e = parse("1001").unwrap_err().to_string();
        assert!(e.contains("1..=1000"), "{e}");
    }
}
