//! `GET /v1/events` (admin): the event feed, a page after a cursor or a long poll
//! ([`crate::feed::Feed::page`]). Every refusal is the API's JSON error and changes nothing.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::extract::{Caller, QueryArg};
use super::AppState;
use crate::domain::{EventPage, EventQuery};

#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "list_events",
    tag = "events",
    security(("admin_token" = [])),
    params(EventQuery),
    responses(
        (status = 200, description = "Events after `after`, oldest first: each order's transitions and each campaign's changes, in the ledger's order, each once. With `wait_ms`, answered as soon as a matching event is written, or empty when none came in time.", body = EventPage),
        (status = 400, description = "A bad query, or a cursor this feed never issued.", body = ErrorBody),
        (status = 410, description = "`after` is older than the oldest event kept (`--events-retention`); the message names where the feed starts now.", body = ErrorBody),
    ),
)]
pub async fn list_events(
    _: Caller,
    State(app): State<AppState>,
    QueryArg(query): QueryArg<EventQuery>,
) -> Result<Json<EventPage>, ApiError> {
    let feed = app.feed.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server has no event feed".to_owned(),
        )
    })?;
    let filter = query.resolve()?;
    Ok(Json(feed.page(&filter).await?))
}
