//! `seckill demo`: seed 000's coupon grab, end to end, in one command.
//!
//! Starts an embedded server in process (fresh data directory, free port), creates a campaign
//! of `--stock` coupons, lets `--users` distinct users claim `--concurrency` at a time, prints an
//! `ab`-style summary and exits non-zero unless exactly `stock` won and the rest got `sold_out`.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use crate::bench::client::Client;
use crate::bench::fire;
use crate::config::ServeConfig;

#[derive(Debug, Clone, Args)]
pub struct DemoOpts {
    /// Coupons on sale.
    #[arg(long, default_value_t = 10)]
    pub stock: u64,
    /// Distinct users, one claim each.
    #[arg(long, default_value_t = 100)]
    pub users: usize,
    /// Claims in flight at once.
    #[arg(long, short = 'c', default_value_t = 20)]
    pub concurrency: usize,
}

pub async fn run(opts: DemoOpts) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        opts.stock >= 1 && opts.users >= 1,
        "--stock and --users must be at least 1"
    );
    let dir = tempfile::tempdir()?;
    let token = hex::encode(rand::random::<[u8; 16]>());
    let server =
        crate::app::App::build(ServeConfig::ephemeral(dir.path().to_owned(), &token)).await?;
    let client = Client::new(&server.url(), &token);
    client
        .create_campaign(&json!({"id": "demo-coupons", "stock": opts.stock, "per_user_limit": 1}))
        .await?;

    let report = fire::storm(
        &client,
        "demo-coupons",
        fire::distinct_users(opts.users),
        opts.concurrency,
    )
    .await;
    let view = client.campaign("demo-coupons").await?;
    let orders = client.all_orders("demo-coupons").await?;
    server.stop().await?;

    let expected_won = opts.stock.min(opts.users as u64);
    let expected_sold_out = opts.users as u64 - expected_won;
    let won = report.count("won");
    let sold_out = report.count("sold_out");
    let ok = won == expected_won
        && sold_out == expected_sold_out
        && orders.len() as u64 == won
        && view.remaining == opts.stock - won;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "seckill demo: {} coupons, {} users, {} at a time (embedded, durable answers)\n",
        opts.stock, opts.users, opts.concurrency
    )?;
    write!(out, "{}", report.summary())?;
    writeln!(
        out,
        "\nLedger: {} orders, remaining {}",
        orders.len(),
        view.remaining
    )?;
    if ok {
        writeln!(out, "OK: exactly {won} won, {sold_out} sold_out")?;
        Ok(ExitCode::SUCCESS)
    } else {
        writeln!(out, "FAILED: expected {expected_won} won and {expected_sold_out} sold_out, got {won} won, {sold_out} sold_out, {} orders", orders.len())?;
        Ok(ExitCode::FAILURE)
    }
}
