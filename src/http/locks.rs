//! The lock routes (`/v1/locks/{name}`, admin): decode, validate, call [`crate::lock::Locks`],
//! encode. Names follow the campaign id rules; every refusal is the API's JSON error and
//! changes nothing.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::extract::{Admin, Body, PathArg};
use super::AppState;
use crate::lock::{self, Attempt, Lease, LockError, Locks};

impl From<LockError> for ApiError {
    fn from(e: LockError) -> Self {
        match e {
            LockError::Invalid(m) => ApiError::invalid(m),
            LockError::NotHolder(_) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            LockError::Unavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "internal", e.to_string())
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    #[serde(default)]
    owner: Option<String>,
    ttl_ms: u64,
    #[serde(default)]
    wait_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    token: String,
    ttl_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    token: String,
}

fn locks(app: &AppState) -> Result<&Locks, ApiError> {
    app.locks.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this deployment has no lock service",
        )
    })
}

fn expires_at(lease: &Lease) -> String {
    chrono::DateTime::from_timestamp_millis(lease.expires_ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn granted(lease: &Lease) -> Value {
    json!({
        "acquired": true,
        "token": lease.token,
        "fence": lease.fence,
        "ttl_ms": lease.ttl.as_millis() as u64,
        "expires_at": expires_at(lease),
    })
}

pub async fn acquire(
    _: Admin,
    State(app): State<AppState>,
    PathArg(name): PathArg<String>,
    Body(body): Body<AcquireBody>,
) -> Result<Json<Value>, ApiError> {
    let locks = locks(&app)?;
    lock::validate_name(&name)?;
    let ttl = lock::validate_ttl_ms(body.ttl_ms)?;
    let wait = lock::validate_wait_ms(body.wait_ms)?;
    let owner = body.owner.unwrap_or_else(|| "anonymous".to_owned());
    match locks.acquire(&name, &owner, ttl, wait).await? {
        Attempt::Granted(lease) => Ok(Json(granted(&lease))),
        Attempt::Held { retry_after } => Ok(Json(json!({
            "acquired": false,
            "retry_after_ms": retry_after.max(Duration::from_millis(1)).as_millis() as u64,
        }))),
    }
}

pub async fn extend(
    _: Admin,
    State(app): State<AppState>,
    PathArg(name): PathArg<String>,
    Body(body): Body<ExtendBody>,
) -> Result<Json<Value>, ApiError> {
    let locks = locks(&app)?;
    lock::validate_name(&name)?;
    let ttl = lock::validate_ttl_ms(body.ttl_ms)?;
    let lease = locks.extend(&name, &body.token, ttl).await?;
    Ok(Json(granted(&lease)))
}

pub async fn release(
    _: Admin,
    State(app): State<AppState>,
    PathArg(name): PathArg<String>,
    Body(body): Body<ReleaseBody>,
) -> Result<Json<Value>, ApiError> {
    let locks = locks(&app)?;
    lock::validate_name(&name)?;
    locks.release(&name, &body.token).await?;
    Ok(Json(json!({"released": true})))
}
