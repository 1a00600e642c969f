//! The guarded routes but the claim itself (`super::claim`): the claim's admin routes
//! (limits, metrics), the shedding middleware of the other public routes and the request
//! timeout both share, with the guards' refusals in the API's error format.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Caller, PathArg};
use super::handlers::CAMPAIGN_ID;
use super::AppState;
use crate::domain::CampaignLimits;

/// `fut`'s output, or `None` when it has not finished within `limit`. A future that is ready
/// at its first poll (every refusal from memory) never arms a timer. Pinned by the caller, so
/// the (large) claim future lives in one place and is never copied.
pub(super) async fn within<F: std::future::Future>(
    limit: Duration,
    mut fut: std::pin::Pin<&mut F>,
) -> Option<F::Output> {
    if let std::task::Poll::Ready(out) = futures::poll!(fut.as_mut()) {
        return Some(out);
    }
    tokio::time::timeout(limit, fut).await.ok()
}

/// Global bound on public requests in flight, and the request timeout (`crate::guard::shed`),
/// for the public routes other than claims (which shed inline, see `super::claim`).
pub async fn shed(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let g = &app.guards;
    let Some(_place) = g.shed.try_enter() else {
        g.metrics.registry.shed.increment(1);
        return ApiError::overloaded("the service is at capacity; retry shortly").into_response();
    };
    match within(g.shed.timeout, std::pin::pin!(next.run(req))).await {
        Some(resp) => resp,
        None => timed_out(&app, false),
    }
}

/// The 503 of a request that found no answer within the request timeout. `reached`: the claim
/// was handed to the engine, so it may have been decided.
pub(super) fn timed_out(app: &AppState, reached: bool) -> Response {
    let g = &app.guards;
    g.metrics.registry.timeouts.increment(1);
    let limit = g.shed.timeout.max(Duration::from_millis(1));
    if reached {
        // The engine may have decided it (claims are cancel-safe: the decision stands
        // and its Idempotency-Key replays it), so "refused before processing" would lie.
        let e = crate::domain::Error::OutcomeUnknown(format!(
            "no answer within {limit:?} after the claim reached the engine; it may or \
             may not have been processed: retry with the same Idempotency-Key to learn \
             its outcome"
        ));
        return ApiError::from(e).into_response();
    }
    ApiError::overloaded(format!(
        "no answer within {limit:?}; the claim was not processed, retry later"
    ))
    .into_response()
}

/// `GET /v1/campaigns/{id}/limits` (admin): the campaign's own limits.
#[utoipa::path(
    get,
    path = "/v1/campaigns/{id}/limits",
    operation_id = "get_limits",
    tag = "campaigns",
    summary = "The campaign's own claim rate limits",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = CAMPAIGN_ID)),
    responses(
        (status = 200, description = "The campaign's rate limits (absent: none).", body = CampaignLimits),
        (status = 404, description = "No such campaign.", body = ErrorBody),
    ),
)]
pub async fn get_limits(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Result<Json<CampaignLimits>, ApiError> {
    app.backend.campaign(&id).await?;
    Ok(Json(app.guards.campaign_limits(&id)))
}

/// `PUT /v1/campaigns/{id}/limits` (admin): replaces the campaign's limits; `{}` removes them.
#[utoipa::path(
    put,
    path = "/v1/campaigns/{id}/limits",
    operation_id = "put_limits",
    tag = "campaigns",
    summary = "Replace the campaign's claim rate limits (`{}` removes them)",
    description = "Limits are GCRA quotas: `count` claims per period with at most `burst` back \
        to back. They apply in addition to the server's global limits.",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = CAMPAIGN_ID)),
    request_body = CampaignLimits,
    responses(
        (status = 200, description = "Stored; applies on every instance within about a second.", body = CampaignLimits),
        (status = 404, description = "No such campaign.", body = ErrorBody),
    ),
)]
pub async fn put_limits(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    Body(body): Body<serde_json::Value>,
) -> Result<Json<CampaignLimits>, ApiError> {
    app.backend.campaign(&id).await?;
    // Only an object: serde would also read a struct from an array.
    if !body.is_object() {
        return Err(ApiError::invalid(
            "limits must be an object such as {\"per_user\": \"5/s\", \"per_ip\": \"50/s\"}",
        ));
    }
    let limits: CampaignLimits = serde_json::from_value(body)
        .map_err(|e| ApiError::invalid(format!("body does not match the schema: {e}")))?;
    let stored = app.backend.set_limits(&id, limits).await?;
    app.guards.set_campaign_limits(&id, stored);
    Ok(Json(stored))
}

/// `GET /metrics` (admin): Prometheus text exposition (every family of
/// `telemetry::catalog`).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    summary = "Prometheus metrics",
    description = "Prometheus text exposition; the README lists the metrics.",
    security(("admin_token" = [])),
    responses((status = 200, description = "Prometheus text exposition (see the README's metrics).", content_type = "text/plain", body = String)),
)]
pub async fn metrics(_: Caller, State(app): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        exposition(&app).await,
    )
}

/// The instance's exposition, with the scrape-time series (backend state, pipeline lag) set.
pub async fn exposition(app: &AppState) -> String {
    exposition_and_rooms(app).await.0
}

/// [`exposition`], and the rooms' figures it was set from (for the dashboard, which shows
/// both without reading the rooms twice).
pub async fn exposition_and_rooms(app: &AppState) -> (String, Vec<crate::room::RoomFigures>) {
    if let Some(lag) = app.backend.pipeline_lag().await {
        crate::telemetry::process::handles()
            .pipeline_lag
            .set(lag as f64);
    }
    app.backend.refresh_metrics(&app.guards.metrics.registry);
    let rooms = match &app.rooms {
        Some(rooms) => {
            rooms
                .refresh_metrics(&app.guards.board.ids(), &app.guards.metrics.registry)
                .await
        }
        None => Vec::new(),
    };
    (app.guards.render_metrics(), rooms)
}
