//! Request latency of every route but claims (which count their own, see `claim::claim`):
//! `seckill_http_request_duration_seconds{route, outcome}` with the route template as axum
//! matched it (a finite set, never the raw path) and the status class as outcome.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;

/// The middleware, as a route layer (only matched routes reach it).
pub async fn timed(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let resp = next.run(req).await;
    let class = match resp.status().as_u16() {
        100..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    app.guards
        .metrics
        .registry
        .route_latency(route, class)
        .record(start.elapsed().as_secs_f64());
    resp
}
