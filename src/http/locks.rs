//! The lock routes (`/v1/locks/{name}`, admin): decode, validate, call [`crate::lock::Locks`],
//! encode. Names follow the campaign id rules; every refusal is the API's JSON error and
//! changes nothing.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Caller, PathArg};
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

/// The path parameter of every lock route.
const LOCK_NAME: &str = "Lock name: 1–64 characters of `[A-Za-z0-9_-]`.";

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"owner": "worker-7", "ttl_ms": 30000, "wait_ms": 0}))]
pub struct AcquireBody {
    /// Who holds it, for humans (1–128 printable bytes; default `anonymous`).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"
    )]
    owner: Option<String>,
    /// Lease length.
    #[schema(minimum = 1, maximum = 3_600_000)]
    ttl_ms: u64,
    /// How long to wait for another holder to let go (default 0: answer at once).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 60_000, default = 0)]
    wait_ms: u64,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    /// The token of the grant.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"
    )]
    token: String,
    /// New lease length from now.
    #[schema(minimum = 1, maximum = 3_600_000)]
    ttl_ms: u64,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// The token of the grant.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"
    )]
    token: String,
}

/// A grant: the lease is the caller's until `expires_at`.
#[derive(Serialize, ToSchema)]
pub struct Granted {
    /// Always `true`.
    acquired: bool,
    /// Proves the holder to extend and release.
    token: String,
    /// Strictly increases with every grant of this name, across expiries, restarts and
    /// failovers: a resource that keeps the highest fence it saw can refuse a stale holder.
    fence: u64,
    ttl_ms: u64,
    expires_at: String,
}

/// Another owner holds the lock.
#[derive(Serialize, ToSchema)]
pub struct Held {
    /// Always `false`.
    acquired: bool,
    /// When to try again.
    retry_after_ms: u64,
}

/// The answer of an acquire.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum Acquired {
    Granted(Granted),
    Held(Held),
}

/// The answer of a release.
#[derive(Serialize, ToSchema)]
pub struct Released {
    /// Always `true`.
    released: bool,
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

fn granted(lease: &Lease) -> Granted {
    Granted {
        acquired: true,
        token: lease.token.clone(),
        fence: lease.fence,
        ttl_ms: lease.ttl.as_millis() as u64,
        expires_at: expires_at(lease),
    }
}

/// Acquire a lease (waiting up to `wait_ms` for another holder).
#[utoipa::path(
    post,
    path = "/v1/locks/{name}",
    operation_id = "acquire_lock",
    tag = "locks",
    security(("admin_token" = [])),
    params(("name" = String, Path, description = LOCK_NAME)),
    request_body = AcquireBody,
    responses(
        (status = 200, description = "Granted, or held by another owner.", body = Acquired),
        (status = 404, description = "This deployment has no lock service.", body = ErrorBody),
    ),
)]
pub async fn acquire(
    _: Caller,
    State(app): State<AppState>,
    PathArg(name): PathArg<String>,
    Body(body): Body<AcquireBody>,
) -> Result<Json<Acquired>, ApiError> {
    let locks = locks(&app)?;
    lock::validate_name(&name)?;
    let ttl = lock::validate_ttl_ms(body.ttl_ms)?;
    let wait = lock::validate_wait_ms(body.wait_ms)?;
    let owner = body.owner.unwrap_or_else(|| "anonymous".to_owned());
    match locks.acquire(&name, &owner, ttl, wait).await? {
        Attempt::Granted(lease) => Ok(Json(Acquired::Granted(granted(&lease)))),
        Attempt::Held { retry_after } => Ok(Json(Acquired::Held(Held {
            acquired: false,
            retry_after_ms: retry_after.max(Duration::from_millis(1)).as_millis() as u64,
        }))),
    }
}

/// Extend a lease held by `token`.
#[utoipa::path(
    post,
    path = "/v1/locks/{name}/extend",
    operation_id = "extend_lock",
    tag = "locks",
    security(("admin_token" = [])),
    params(("name" = String, Path, description = LOCK_NAME)),
    request_body = ExtendBody,
    responses(
        (status = 200, description = "Extended; the new `expires_at`.", body = Granted),
        (status = 404, description = "This deployment has no lock service.", body = ErrorBody),
        (status = 409, description = "The token no longer holds the lock.", body = ErrorBody),
    ),
)]
pub async fn extend(
    _: Caller,
    State(app): State<AppState>,
    PathArg(name): PathArg<String>,
    Body(body): Body<ExtendBody>,
) -> Result<Json<Granted>, ApiError> {
    let locks = locks(&app)?;
    lock::validate_name(&name)?;
    let ttl = lock::validate_ttl_ms(body.ttl_ms)?;
    let lease = locks.extend(&name, &body.token, ttl).await?;
    Ok(Json(granted(&lease)))
}

/// Release a lease held by `token` (safe release: another holder's lock is untouched).
#[utoipa::path(
    delete,
    path = "/v1/locks/{name}",
    operation_id = "release_lock",
    tag = "locks",
    security(("admin_token" = [])),
    params(("name" = String, Path, description = LOCK_NAME)),
    request_body = ReleaseBody,
    responses(
        (status = 200, description = "Released.", body = Released),
        (status = 404, description = "This deployment has no lock service.", body = ErrorBody),
        (status = 409, description = "The token does not hold the lock; it is untouched.", body = ErrorBody),
    ),
)]
pub async fn release(
    _: Caller,
    State(app): State<AppState>,
    PathArg(name): PathArg<String>,
    Body(body): Body<ReleaseBody>,
) -> Result<Json<Released>, ApiError> {
    let locks = locks(&app)?;
    lock::validate_name(&name)?;
    locks.release(&name, &body.token).await?;
    Ok(Json(Released { released: true }))
}
