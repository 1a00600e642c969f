//! `seckill baseline` (hidden): the HTTP ceiling of the benchmark suite.
//!
//! A trivial handler on the same stack as `serve` (axum, tokio, the same worker threads): it
//! decodes the claim body into the same request type and answers a `won`-shaped JSON of the
//! same size class, with no engine, no ledger, no middleware. `seckill bench` measured against
//! it in the same run shows how much of the machine HTTP alone takes, so the ratio of seckill
//! to it is an honest figure on any machine.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use serde_json::{json, Value};

use crate::domain::{ClaimAnswer, ClaimRequest, Outcome};

#[derive(Debug, Clone, Args)]
pub struct BaselineOpts {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
}

/// The routes of the baseline: the claim route and the campaign view the bench reads first.
pub fn router() -> Router {
    Router::new()
        .route("/v1/campaigns/{id}/claims", post(claim))
        .route("/v1/campaigns/{id}", get(view))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .with_state(Arc::new(AtomicU64::new(0)))
}

async fn claim(
    State(seq): State<Arc<AtomicU64>>,
    Path(id): Path<String>,
    Json(req): Json<ClaimRequest>,
) -> Json<ClaimAnswer> {
    let n = seq.fetch_add(1, Ordering::Relaxed) + 1;
    Json(ClaimAnswer {
        order_id: Some(format!("{id}-{n}")),
        qty: Some(req.qty),
        ..ClaimAnswer::bare(Outcome::Won)
    })
}

async fn view(Path(id): Path<String>) -> Json<Value> {
    Json(json!({
        "id": id, "kind": "stock", "total": 1_000_000_000u64, "remaining": 1_000_000_000u64,
        "per_user_limit": 1, "status": "active", "starts_at": null, "ends_at": null
    }))
}

pub async fn run(opts: BaselineOpts) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "baseline listening on http://{addr}");
    axum::serve(listener, router())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(ExitCode::SUCCESS)
}
