//! The guarded routes: the claim pipeline of `crate::guard`, its admin routes (limits,
//! metrics) and the shedding middleware, with the guards' refusals in the API's error format.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::extract::{Admin, Body, IdemHeader, PathArg};
use super::AppState;
use crate::domain::{CampaignLimits, ClaimAnswer, ClaimRequest, Outcome};
use crate::guard::identity::{self, IdentityError};
use crate::guard::rate::Limited;

/// The client's IP as the per-IP limits see it (socket peer, or the trusted proxy's header).
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        // Served without connect info (a router driven in-process): no peer to key on.
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
        Ok(ClientIp(app.guards.client_ip.resolve(peer, &parts.headers)))
    }
}

fn value(v: impl ToString) -> HeaderValue {
    HeaderValue::from_str(&v.to_string()).expect("numbers and labels are valid header values")
}

/// 429 `rate_limited` with `Retry-After` and the RateLimit headers of the limit that refused.
fn rate_limited(l: Limited) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!(
            "too many claims ({}); retry in {} s",
            l.label,
            l.retry_after_secs()
        ),
    )
    .with_header(header::RETRY_AFTER, value(l.retry_after_secs()))
    .with_header(HeaderName::from_static("ratelimit-remaining"), value(0))
    .with_header(
        HeaderName::from_static("ratelimit-reset"),
        value(l.reset_secs()),
    );
    if let Some(rate) = l.rate {
        let policy = format!(
            "{};w={};burst={};comment=\"{}\"",
            rate.count,
            rate.period.as_secs(),
            rate.burst,
            l.label
        );
        e = e
            .with_header(
                HeaderName::from_static("ratelimit-limit"),
                value(rate.count),
            )
            .with_header(HeaderName::from_static("ratelimit-policy"), value(policy));
    }
    e
}

fn unauthorized(e: IdentityError) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string())
}

/// `POST /v1/campaigns/{id}/claims` through every guard (order documented in `crate::guard`).
pub async fn claim(
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    IdemHeader(key): IdemHeader,
    ClientIp(ip): ClientIp,
    req: Request,
) -> Result<Json<ClaimAnswer>, ApiError> {
    let g = &app.guards;
    let reached = req.extensions().get::<ReachedEngine>().cloned();
    g.limit_ip(&id, ip).await.map_err(rate_limited)?;
    let token = req
        .headers()
        .get(identity::HEADER)
        .map(|v| v.to_str().map(str::to_owned));
    let Body(body) = Body::<ClaimRequest>::from_request(req, &app).await?;
    body.validate()?;
    if let Some(verifier) = &g.identity {
        let checked = match token {
            Some(Err(_)) => Err(IdentityError::Malformed),
            Some(Ok(t)) => verifier.check(Some(&t), &body.user_id, chrono::Utc::now().timestamp()),
            None => verifier.check(None, &body.user_id, 0),
        };
        if let Err(e) = checked {
            g.metrics
                .identity_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(unauthorized(e));
        }
    }
    g.limit_user(&id, &body.user_id)
        .await
        .map_err(rate_limited)?;
    if g.sold_out_fast(&id, &body.user_id, body.qty, key.is_some()) {
        return Ok(Json(ClaimAnswer {
            remaining: Some(0),
            ..ClaimAnswer::bare(Outcome::SoldOut)
        }));
    }
    let _place = g.admit(&id).map_err(|_| {
        ApiError::overloaded("too many claims of this campaign are being decided; retry shortly")
    })?;
    if let Some(reached) = &reached {
        reached.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(Json(app.backend.claim(&id, body, key).await?))
}

/// Set by the claim handler when the claim is handed to the engine: from then on a request
/// timeout can no longer say the claim was refused before processing.
#[derive(Clone, Default)]
pub struct ReachedEngine(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

/// Global bound on public requests in flight, and the request timeout (`crate::guard::shed`).
pub async fn shed(State(app): State<AppState>, req: Request, next: Next) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    let g = &app.guards;
    let Some(_place) = g.shed.try_enter() else {
        g.metrics.shed.fetch_add(1, Relaxed);
        return ApiError::overloaded("the service is at capacity; retry shortly").into_response();
    };
    let reached = ReachedEngine::default();
    let mut req = req;
    req.extensions_mut().insert(reached.clone());
    match tokio::time::timeout(g.shed.timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => {
            g.metrics.timeouts.fetch_add(1, Relaxed);
            let limit = g.shed.timeout.max(Duration::from_millis(1));
            if reached.0.load(Relaxed) {
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
    }
}

/// `GET /v1/campaigns/{id}/limits` (admin): the campaign's own limits.
pub async fn get_limits(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Result<Json<CampaignLimits>, ApiError> {
    app.backend.campaign(&id).await?;
    Ok(Json(app.guards.campaign_limits(&id)))
}

/// `PUT /v1/campaigns/{id}/limits` (admin): replaces the campaign's limits; `{}` removes them.
pub async fn put_limits(
    _: Admin,
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

/// `GET /metrics` (admin): Prometheus text exposition of the guard counters.
pub async fn metrics(_: Admin, State(app): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.guards.render_metrics() + &app.backend.metrics(),
    )
}
