//! `GET /healthz`: whether the server can reach its engine and ledger, with the deployment's
//! details, for load balancers and operators. Not shed, so it answers during a storm.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::error::ErrorDetail;
use super::AppState;

/// `GET /healthz`: `ok`, or `unavailable` with the reason; deployments add details
/// (scale-out: `pipeline_lag`, `redis_settings`, `refusing_claims`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: HealthStatus,
    /// Scale-out: won orders not yet in the ledger.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub pipeline_lag: Option<u64>,
    /// Why the engine or ledger cannot serve (`unavailable` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<ErrorDetail>,
    /// The deployment's details (scale-out: `redis_settings`, `refusing_claims`).
    #[serde(flatten)]
    #[schema(ignore)]
    pub details: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Ok,
    Unavailable,
}

/// Whether the server can reach its engine and ledger.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    responses(
        (status = 200, description = "Serving.", body = Health),
        (status = 503, description = "The engine or ledger is unavailable.", body = Health),
    ),
)]
pub async fn healthz(State(app): State<AppState>) -> (StatusCode, Json<Health>) {
    let details = match app.backend.health_details() {
        Some(Value::Object(details)) => details,
        _ => Map::new(),
    };
    let (status, body) = match app.backend.health().await {
        Ok(()) => (
            StatusCode::OK,
            Health {
                status: HealthStatus::Ok,
                pipeline_lag: app.backend.pipeline_lag().await,
                error: None,
                details,
            },
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Health {
                status: HealthStatus::Unavailable,
                pipeline_lag: None,
                error: Some(ErrorDetail {
                    code: "internal",
                    message: e.to_string(),
                    outcome: None,
                    request_id: super::request_id::current_str(),
                }),
                details,
            },
        ),
    };
    (status, Json(body))
}
