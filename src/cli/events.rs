//! `seckill events tail`: the event feed of a running seckill as JSON lines, one event per
//! line, followed as it grows — the shortest way to watch a sale's orders change, or to pipe
//! them into a shop's own tooling (`jq`, a queue's command-line producer).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::bench::client::Client;
use crate::domain::{EventPage, EventQuery};
use crate::guard::secret::Secret;

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Print the feed from a cursor as JSON lines and follow it.
    Tail(TailOpts),
    /// A webhook receiver that verifies signatures and measures delivery lag (to try an
    /// endpoint, or as a benchmark's receiver).
    Receive(super::receive::ReceiveOpts),
}

#[derive(Debug, Args)]
pub struct TailOpts {
    /// The running seckill (its admin routes).
    #[arg(long, env = "SECKILL_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Its admin token.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Secret,
    /// Start after this cursor (an event's `cursor`); default: the oldest event kept.
    #[arg(long)]
    pub after: Option<String>,
    /// Only events of this type (`order.won`, `order.confirmed`, …).
    #[arg(long = "type")]
    pub kind: Option<String>,
    /// Only this campaign's events.
    #[arg(long)]
    pub campaign: Option<String>,
    /// Stop at the newest event instead of waiting for more.
    #[arg(long)]
    pub no_follow: bool,
}

pub async fn run(cmd: EventsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        EventsCommand::Tail(opts) => tail(opts).await,
        EventsCommand::Receive(opts) => super::receive::run(opts).await,
    }
}

async fn tail(opts: TailOpts) -> anyhow::Result<ExitCode> {
    let client = Client::new(&opts.url, opts.admin_token.expose());
    let mut after = opts.after.clone();
    let mut out = std::io::stdout().lock();
    loop {
        let query = EventQuery {
            after: after.clone(),
            limit: Some(1000),
            campaign: opts.campaign.clone(),
            kind: opts.kind.clone(),
            wait_ms: (!opts.no_follow).then_some(25_000),
        };
        let (status, body) = match client.events(&query).await {
            Ok(answer) => answer,
            Err(e) if !opts.no_follow => {
                tracing::warn!(error = %e, "reading the feed failed; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if status.is_server_error() && !opts.no_follow {
            tracing::warn!(%status, %body, "the feed answered an error; trying again");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        anyhow::ensure!(status.is_success(), "the feed answered {status}: {body}");
        let page: EventPage = serde_json::from_value(body).context("an event page")?;
        for e in &page.events {
            writeln!(out, "{}", serde_json::to_string(e)?)?;
        }
        out.flush()?;
        let short = page.events.len() < 1000;
        after = Some(page.next_cursor);
        if short && opts.no_follow {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
