//! `/dashboard`: a live page of the sale for the people running it.
//!
//! The page, its script and its style are compiled into the binary (no CDN, no request leaves
//! the page). The page itself holds no data and asks for the admin token (or takes it from the
//! URL fragment `#token=…`, which browsers never send to the server); every second it reads
//! `GET /dashboard/data` with that token: the campaigns' views and the samples of this
//! instance's `/metrics`, from which the script derives rates and percentiles. So the
//! dashboard shows exactly what Prometheus scrapes. It lives with the admin routes (only on
//! `--admin-listen` when that is set).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};

use super::extract::Caller;
use super::AppState;
use crate::telemetry::exposition;

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// Most campaigns shown (sorted by id); the rest are counted.
pub const MAX_CAMPAIGNS: usize = 50;

/// Families sent to the page (everything else in `/metrics` stays out of its payload).
const SHOWN: &[&str] = &[
    "seckill_claims_total",
    "seckill_http_request_duration_seconds_bucket",
    "seckill_rate_limited_total",
    "seckill_shed_total",
    "seckill_timeouts_total",
    "seckill_identity_refused_total",
    "seckill_in_flight",
    "seckill_campaign_fast_sold_out_total",
    "seckill_campaign_admission_refused_total",
    "seckill_campaign_remaining",
    "seckill_pipeline_lag",
    "seckill_redis_refusing_claims",
    "seckill_room_admitted",
    "seckill_room_tickets_refused_total",
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
];

fn asset(kind: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

#[utoipa::path(
    get,
    path = "/dashboard",
    operation_id = "dashboard",
    tag = "operations",
    summary = "The live sale dashboard (the page; its data needs the admin token)",
    responses((status = 200, description = "The live sale dashboard (the page; its data needs the admin token).", content_type = "text/html", body = String)),
)]
pub async fn page() -> impl IntoResponse {
    asset("text/html; charset=utf-8", PAGE)
}

#[utoipa::path(
    get,
    path = "/dashboard/dashboard.js",
    operation_id = "dashboard_js",
    tag = "operations",
    summary = "The dashboard's script",
    responses((status = 200, description = "The dashboard's script.", content_type = "text/javascript", body = String)),
)]
pub async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

#[utoipa::path(
    get,
    path = "/dashboard/dashboard.css",
    operation_id = "dashboard_css",
    tag = "operations",
    summary = "The dashboard's style sheet",
    responses((status = 200, description = "The dashboard's style sheet.", content_type = "text/css", body = String)),
)]
pub async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}

/// `GET /dashboard/data` (admin).
#[utoipa::path(
    get,
    path = "/dashboard/data",
    operation_id = "dashboard_data",
    tag = "operations",
    summary = "The dashboard's figures: campaigns and metric samples",
    security(("admin_token" = [])),
    responses((status = 200, description = "The dashboard's figures: campaigns and metric samples.", content_type = "application/json", body = serde_json::Value)),
)]
pub async fn data(_: Caller, State(app): State<AppState>) -> Json<Value> {
    let (text, rooms) = super::guarded::exposition_and_rooms(&app).await;
    let samples: Vec<_> = exposition::parse(&text)
        .into_iter()
        .filter(|s| SHOWN.contains(&s.name.as_str()))
        .filter(|s| {
            s.name != "seckill_http_request_duration_seconds_bucket"
                || s.labels.get("route").is_some_and(|r| r == "claim")
        })
        .collect();
    let ids = app.guards.board.ids();
    let mut campaigns = Vec::new();
    for id in ids.iter().take(MAX_CAMPAIGNS) {
        if let Ok(view) = app.backend.campaign(id).await {
            campaigns.push(view);
        }
    }
    let lag = app.backend.pipeline_lag().await;
    let sinks = match &app.delivery {
        Some(d) => sinks(d).await,
        None => Vec::new(),
    };
    Json(json!({
        "now_ms": crate::domain::now().timestamp_millis(),
        "campaigns": campaigns,
        "campaigns_not_shown": ids.len().saturating_sub(MAX_CAMPAIGNS),
        "pipeline_lag": lag,
        "samples": samples,
        "sinks": sinks,
        "rooms": rooms,
    }))
}

/// Where events go and how far each sink got (the ledger's rows, the same on every instance).
async fn sinks(d: &crate::delivery::Delivery) -> Vec<Value> {
    let (Ok(rows), Ok(head)) = (d.ledger().sinks().await, d.feed().head().await) else {
        return Vec::new();
    };
    let now = crate::clock::now().timestamp_micros();
    rows.into_iter()
        .map(|r| {
            let kind = r.kind.clone();
            let subject = r.subject.clone();
            let mut v = serde_json::to_value(crate::delivery::view::Endpoint::of(r, head, now))
                .unwrap_or_default();
            v["kind"] = json!(kind);
            if let Some(s) = subject {
                v["url"] = json!(format!("{} ({s}.>)", v["url"].as_str().unwrap_or_default()));
            }
            v
        })
        .collect()
}
