//! `seckill serve` and `seckill worker`: assemble the deployment (`crate::app`) and run it
//! until SIGTERM or Ctrl-C.

use std::process::ExitCode;

use crate::app::{scale_out::Worker, shutdown_signal, App};
use crate::config::{ServeConfig, WorkerConfig};

pub async fn run(cfg: ServeConfig) -> anyhow::Result<ExitCode> {
    let app = App::build(cfg).await?;
    shutdown_signal().await;
    tracing::info!("shutdown requested");
    app.stop().await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn run_worker(cfg: WorkerConfig) -> anyhow::Result<ExitCode> {
    let worker = Worker::build(&cfg).await?;
    shutdown_signal().await;
    tracing::info!("shutdown requested");
    worker.stop().await;
    tracing::info!("worker stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
