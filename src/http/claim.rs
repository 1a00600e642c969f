//! `POST /v1/campaigns/{id}/claims`: the one implementation of a claim over HTTP.
//!
//! Two doors lead here and both must give the same answer byte for byte: the router's handler
//! ([`claim`]) and the listener's fast path (`super::fast`), which recognises the claim route
//! before the router and calls [`answer`] with the campaign id it already read from the path.
//! Everything a claim does — shedding, the request timeout, the guards and rate limits, the
//! body limit and timeout, the body's decoding, the engine call, the metrics — lives here
//! once, so the two doors cannot drift apart.

use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;

use super::claim_body::parse_claim_body;
use super::error::{ApiError, ErrorBody};
use super::extract::{Body, IdemHeader, PathArg};
use super::guarded::{timed_out, within};
use super::handlers::CAMPAIGN_ID;
use super::rate_limited::RateLimited;
use super::AppState;
use crate::domain::{ClaimAnswer, ClaimRequest, Outcome};
use crate::guard::identity::{self, IdentityError};
use crate::guard::rate::Limited;
use crate::guard::soldout::StockEntry;
use crate::telemetry::claims::ClaimEnd;

fn value(v: impl ToString) -> HeaderValue {
    HeaderValue::from_str(&v.to_string()).expect("numbers and labels are valid header values")
}

/// 429 `rate_limited` with `Retry-After` and the RateLimit headers of the limit that refused.
pub(super) fn rate_limited(l: Limited) -> ApiError {
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
        ("X-Seckill-Ticket" = Option<String>, Header, max_length = 128,
         description = "The ticket the waiting room gave this user for this campaign \
            (`GET /v1/campaigns/{id}/queue/{user_id}` once `admitted`); required on a campaign \
            with a waiting room, ignored otherwise."),
    ),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "Processed: the outcome. Only `won` changed anything.", body = ClaimAnswer),
        (status = 401, description = "A signed identity is required and missing, malformed, expired or for another user.", body = ErrorBody),
        (status = 403, description = "`not_admitted`: the campaign has a waiting room and the claim carries no valid `X-Seckill-Ticket` for this user and campaign (missing, malformed, forged, for another user or campaign, or expired). Nothing was changed.", body = ErrorBody),
        (status = 404, description = "No such campaign.", body = ErrorBody),
        RateLimited,
    ),
)]
pub async fn claim(State(app): State<AppState>, req: Request) -> Response {
    answer(&app, req, None).await
}

/// The answer to a claim. `id`: the campaign id when the caller already read it from a plain
/// path segment (the fast path); `None` takes it from the router's path parameter.
pub(super) async fn answer<A>(app: A, req: Request, id: Option<String>) -> Response
where
    A: std::ops::Deref<Target = AppState>,
{
    use std::sync::atomic::Ordering::Relaxed;
    let app = &*app;
    let start = Instant::now();
    let g = &app.guards;
    let refuse = |e: ApiError| {
        g.metrics
            .claim(None, ClaimEnd::error(e.code, false), secs(start));
        e.into_response()
    };
    let (parts, body) = match super::arrival::arrived(app, req).await {
        Ok(arrived) => arrived,
        Err(e) => return refuse(e),
    };
    let ip = super::arrival::client_ip(app, &parts.extensions, &parts.headers);
    let Ok(_share) = g.in_flight_share.take(ip) else {
        return refuse(ApiError::overloaded(
            "this client has too many requests in flight; retry shortly",
        ));
    };
    let Some(_place) = g.shed.try_enter() else {
        g.metrics.registry.shed.increment(1);
        return refuse(ApiError::overloaded(
            "the service is at capacity; retry shortly",
        ));
    };
    let reached = AtomicBool::new(false);
    let mut entry = None;
    let decided = {
        let decide = std::pin::pin!(decide(app, (parts, body, ip), id, &reached, &mut entry));
        within(g.shed.timeout, decide).await
    };
    let (resp, end) = match decided {
        Some(Ok((resp, outcome))) => (resp, ClaimEnd::outcome(outcome)),
        Some(Err(e)) => {
            let end = ClaimEnd::error(e.code, e.outcome_unknown);
            (e.into_response(), end)
        }
        None => {
            let reached = reached.load(Relaxed);
            let end = ClaimEnd::error(if reached { "internal" } else { "overloaded" }, reached);
            (timed_out(app, reached), end)
        }
    };
    g.metrics.claim(entry.as_deref(), end, secs(start));
    resp
}

fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// The claim's guards and engine call, once it holds a shedding place; the answer and its
/// outcome. `entry` is set to the campaign's board entry as soon as the id is known.
async fn decide(
    app: &AppState,
    (mut parts, body, ip): (Parts, Bytes, IpAddr),
    id: Option<String>,
    reached: &AtomicBool,
    entry: &mut Option<Arc<StockEntry>>,
) -> Result<(Response, Outcome), ApiError> {
    let id = match id {
        Some(id) => id,
        None => {
            PathArg::<String>::from_request_parts(&mut parts, app)
                .await?
                .0
        }
    };
    *entry = app.guards.board.get(&id);
    let entry = entry.as_ref();
    let IdemHeader(key) = IdemHeader::from_request_parts(&mut parts, app).await?;
    let g = &app.guards;
    g.limit_ip(&id, ip).await.map_err(rate_limited)?;
    let token = parts
        .headers
        .get(identity::HEADER)
        .map(|v| v.to_str().map(str::to_owned));
    let parts_ticket = parts
        .headers
        .get(crate::room::ticket::HEADER)
        .and_then(|v| v.to_str().ok().map(str::to_owned));
    let body = claim_body(parts, body, app).await?;
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
    if let Some(rooms) = &app.rooms {
        let ticket = parts_ticket.as_deref();
        if let Err(e) = rooms.admit(&id, &body.user_id, ticket).await? {
            return Err(super::room::not_admitted(e));
        }
    }
    g.limit_user(&id, entry, &body.user_id)
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

/// The claim body (already read in full, `arrival.rs`), decoded. Only an exact
/// `application/json` content type takes the hand-written parser; any other value goes through
/// the generic extractor, which accepts or refuses it with its usual message.
async fn claim_body(parts: Parts, body: Bytes, app: &AppState) -> Result<ClaimRequest, ApiError> {
    let plain = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !plain {
        let req = Request::from_parts(parts, axum::body::Body::from(body));
        let Body(body) = Body::<ClaimRequest>::from_request(req, app).await?;
        return Ok(body);
    }
    parse_claim_body(&body)
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
