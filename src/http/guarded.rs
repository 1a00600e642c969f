//! The guarded routes: the claim pipeline of `crate::guard`, its admin routes (limits,
//! metrics) and the shedding middleware, with the guards' refusals in the API's error format.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;

use super::claim_body::parse_claim_body;
use super::error::{ApiError, ErrorBody};
use super::extract::{json_rejection, Admin, Body, IdemHeader, PathArg};
use super::handlers::CAMPAIGN_ID;
use super::openapi::RateLimited;
use super::AppState;
use crate::domain::{CampaignLimits, ClaimAnswer, ClaimRequest, Outcome};
use crate::guard::identity::{self, IdentityError};
use crate::guard::rate::Limited;
use crate::guard::soldout::StockEntry;
use crate::telemetry::claims::ClaimEnd;

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
///
/// This is the storm path: a refusal here must cost about what a trivial handler costs. So the
/// claim route sheds inline instead of through a middleware (no boxed inner service cloned per
/// request), arms the request timeout only when the answer is not immediate, parses the common
/// body by hand ([`parse_claim_body`]), skips guards with nothing configured before they
/// allocate, and answers the fast path's `sold_out` with constant bytes.
///
/// Every answer is counted once, on pre-registered handles: its latency by outcome and its
/// campaign's `seckill_claims_total` (the board entry found once per claim).
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/claims",
    operation_id = "claim",
    tag = "claims",
    summary = "Claim `qty` units of a campaign (public)",
    description = "Answers 200 with an `outcome` once processed, checked in this order: \
        `paused`/`closed` (not selling), `not_started`/`ended` (outside the sale window), \
        `already_claimed` (the user holds `per_user_limit` units), `over_limit` (held + qty \
        would exceed it), `sold_out` (fewer than qty remain; nothing is partially filled), \
        `won` (the units are the user's; the order is durable before this answer). A claim \
        refused before processing answers 429 (`rate_limited`) or 503 (`overloaded`).",
    params(
        ("id" = String, Path, description = CAMPAIGN_ID),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
         description = "1–255 visible ASCII characters. A retry with the same key, campaign and \
            user answers the first processed answer again, whatever its outcome (the same \
            `order_id` for a `won`), and claims nothing more. Kept at least 24 h for `won`, \
            across restarts."),
        ("X-Seckill-User" = Option<String>, Header,
         description = "Signed identity token of `user_id` (`seckill sign-user`); required when \
            the server has `--user-signing-key`, ignored otherwise."),
    ),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "Processed: the outcome. Only `won` changed anything.", body = ClaimAnswer),
        (status = 401, description = "A signed identity is required and missing, malformed, expired or for another user.", body = ErrorBody),
        (status = 404, description = "No such campaign.", body = ErrorBody),
        RateLimited,
    ),
)]
pub async fn claim(State(app): State<AppState>, req: Request) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    let start = Instant::now();
    let g = &app.guards;
    let Some(_place) = g.shed.try_enter() else {
        g.metrics.registry.shed.increment(1);
        let e = ApiError::overloaded("the service is at capacity; retry shortly");
        g.metrics
            .claim(None, ClaimEnd::error(e.code, false), secs(start));
        return e.into_response();
    };
    let reached = AtomicBool::new(false);
    let mut entry = None;
    let (resp, end) = match within(g.shed.timeout, decide(&app, req, &reached, &mut entry)).await {
        Some(Ok((resp, outcome))) => (resp, ClaimEnd::outcome(outcome)),
        Some(Err(e)) => {
            let end = ClaimEnd::error(e.code, e.outcome_unknown);
            (e.into_response(), end)
        }
        None => {
            let reached = reached.load(Relaxed);
            let end = ClaimEnd::error(if reached { "internal" } else { "overloaded" }, reached);
            (timed_out(&app, reached), end)
        }
    };
    g.metrics.claim(entry.as_deref(), end, secs(start));
    resp
}

fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// `fut`'s output, or `None` when it has not finished within `limit`. A future that is ready
/// at its first poll (every refusal from memory) never arms a timer.
async fn within<F: std::future::Future>(limit: Duration, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    if let std::task::Poll::Ready(out) = futures::poll!(fut.as_mut()) {
        return Some(out);
    }
    tokio::time::timeout(limit, fut).await.ok()
}

/// The claim's guards and engine call, once it holds a shedding place; the answer and its
/// outcome. `entry` is set to the campaign's board entry as soon as the id is known.
async fn decide(
    app: &AppState,
    req: Request,
    reached: &AtomicBool,
    entry: &mut Option<Arc<StockEntry>>,
) -> Result<(Response, Outcome), ApiError> {
    let (mut parts, body) = req.into_parts();
    let PathArg(id) = PathArg::<String>::from_request_parts(&mut parts, app).await?;
    *entry = app.guards.board.get(&id);
    let entry = entry.as_ref();
    let IdemHeader(key) = IdemHeader::from_request_parts(&mut parts, app).await?;
    let ClientIp(ip) = ClientIp::from_request_parts(&mut parts, app).await?;
    let req = Request::from_parts(parts, body);
    let g = &app.guards;
    g.limit_ip(&id, ip).await.map_err(rate_limited)?;
    let token = req
        .headers()
        .get(identity::HEADER)
        .map(|v| v.to_str().map(str::to_owned));
    let body = claim_body(req, app).await?;
    body.validate()?;
    if let Some(verifier) = &g.identity {
        let checked = match token {
            Some(Err(_)) => Err(IdentityError::Malformed),
            Some(Ok(t)) => verifier.check(Some(&t), &body.user_id, chrono::Utc::now().timestamp()),
            None => verifier.check(None, &body.user_id, 0),
        };
        if let Err(e) = checked {
            g.metrics.registry.identity_refused.increment(1);
            return Err(unauthorized(e));
        }
    }
    g.limit_user(&id, &body.user_id)
        .await
        .map_err(rate_limited)?;
    if g.sold_out_fast(entry.map(|e| &**e), &body.user_id, body.qty, key.is_some()) {
        return Ok((sold_out_answer(), Outcome::SoldOut));
    }
    let _place = g.admit(entry).map_err(|_| {
        ApiError::overloaded("too many claims of this campaign are being decided; retry shortly")
    })?;
    reached.store(true, std::sync::atomic::Ordering::Relaxed);
    let answer = app.backend.claim(&id, body, key).await?;
    let outcome = answer.outcome;
    Ok((Json(answer).into_response(), outcome))
}

/// The claim body: read in full (body limit and timeout as every route) and decoded. Only an
/// exact `application/json` content type takes the hand-written parser; any other value goes
/// through the generic extractor, which accepts or refuses it with its usual message.
async fn claim_body(req: Request, app: &AppState) -> Result<ClaimRequest, ApiError> {
    let plain = req
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !plain {
        let Body(body) = Body::<ClaimRequest>::from_request(req, app).await?;
        return Ok(body);
    }
    let bytes = Bytes::from_request(req, app)
        .await
        .map_err(|r| json_rejection(JsonRejection::from(r)))?;
    parse_claim_body(&bytes)
}

/// The JSON of the fast path's answer; equal to serialising its [`ClaimAnswer`] (tested).
const SOLD_OUT_JSON: &[u8] = br#"{"outcome":"sold_out","remaining":0}"#;

/// 200 `sold_out` with `remaining: 0`, the same bytes and headers as the engine's answer.
fn sold_out_answer() -> Response {
    let mut resp = Response::new(axum::body::Body::from(Bytes::from_static(SOLD_OUT_JSON)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Global bound on public requests in flight, and the request timeout (`crate::guard::shed`),
/// for the public routes other than claims (which shed inline, see [`claim`]).
pub async fn shed(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let g = &app.guards;
    let Some(_place) = g.shed.try_enter() else {
        g.metrics.registry.shed.increment(1);
        return ApiError::overloaded("the service is at capacity; retry shortly").into_response();
    };
    match within(g.shed.timeout, next.run(req)).await {
        Some(resp) => resp,
        None => timed_out(&app, false),
    }
}

/// The 503 of a request that found no answer within the request timeout. `reached`: the claim
/// was handed to the engine, so it may have been decided.
fn timed_out(app: &AppState, reached: bool) -> Response {
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
    _: Admin,
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
pub async fn metrics(_: Admin, State(app): State<AppState>) -> impl IntoResponse {
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
    if let Some(lag) = app.backend.pipeline_lag().await {
        crate::telemetry::process::handles()
            .pipeline_lag
            .set(lag as f64);
    }
    app.backend.refresh_metrics(&app.guards.metrics.registry);
    app.guards.render_metrics()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ClaimAnswer, Outcome};

    #[test]
    fn the_constant_sold_out_is_the_engines_answer() {
        let answer = ClaimAnswer {
            remaining: Some(0),
            ..ClaimAnswer::bare(Outcome::SoldOut)
        };
        assert_eq!(serde_json::to_vec(&answer).unwrap(), SOLD_OUT_JSON);
        let resp = sold_out_answer();
        let json = Json(answer).into_response();
        assert_eq!(resp.status(), json.status());
        assert_eq!(resp.headers(), json.headers());
    }
}
