//! `POST /v1/campaigns/{id}/queue` and `GET /v1/campaigns/{id}/queue/{user_id}`: the waiting
//! room's public routes (`crate::room`), and the ticket check claims go through.

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::extract::{Body, PathArg};
use super::handlers::CAMPAIGN_ID;
use super::rate_limited::RateLimited;
use super::AppState;
use crate::domain::{Error, JoinRequest, RoomAnswer};
use crate::guard::identity::{self, IdentityError};
use crate::room::ticket::TicketError;
use crate::room::Rooms;

fn rooms(app: &AppState) -> Result<&Rooms, ApiError> {
    app.rooms
        .as_deref()
        .ok_or_else(|| Error::NotFound("this server has no waiting rooms".into()).into())
}

/// 403 `not_admitted`: a claim on a campaign with a waiting room without a valid ticket.
pub(super) fn not_admitted(e: TicketError) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "not_admitted", e.to_string())
}

/// The guards a claim passes before its body is believed, for the room's routes: the
/// per-IP and per-user rate limits (the same buckets as claims, so polling counts against
/// the claim budget of the same client) and the identity check.
async fn guarded(app: &AppState, parts: &Parts, id: &str, user: &str) -> Result<(), ApiError> {
    let g = &app.guards;
    let ip = super::arrival::client_ip(app, &parts.extensions, &parts.headers);
    g.limit_ip(id, ip)
        .await
        .map_err(super::claim::rate_limited)?;
    identified(app, &parts.headers, user)?;
    let entry = g.board.get(id);
    g.limit_user(id, entry.as_ref(), user)
        .await
        .map_err(super::claim::rate_limited)
}

/// The identity check of a claim (`X-Seckill-User`), for the room's routes.
fn identified(app: &AppState, headers: &HeaderMap, user: &str) -> Result<(), ApiError> {
    let Some(verifier) = &app.guards.identity else {
        return Ok(());
    };
    let checked = match headers.get(identity::HEADER).map(|v| v.to_str()) {
        Some(Err(_)) => Err(IdentityError::Malformed),
        Some(Ok(t)) => verifier.check(Some(t), user, chrono::Utc::now().timestamp()),
        None => verifier.check(None, user, 0),
    };
    checked.map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string()))
}

/// Join a campaign's waiting room (public).
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/queue",
    operation_id = "join_queue",
    tag = "waiting room",
    params(
        ("id" = String, Path, description = CAMPAIGN_ID),
        ("X-Seckill-User" = Option<String>, Header,
         description = "Signed identity token of `user_id`; required when the server has \
            `--user-signing-key`, ignored otherwise."),
    ),
    request_body = JoinRequest,
    responses(
        (status = 200, description = "The user's place: `prequeue`, `waiting`, `admitted` \
            (with the ticket) or `sold_out`. Joining again answers the same place.", body = RoomAnswer),
        (status = 400, description = "Bad `user_id`.", body = ErrorBody),
        (status = 401, description = "A signed identity is required and missing or wrong.", body = ErrorBody),
        (status = 404, description = "No such campaign, or it has no waiting room.", body = ErrorBody),
        RateLimited,
    ),
)]
pub async fn join(
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    parts: Parts,
    Body(body): Body<JoinRequest>,
) -> Result<Json<RoomAnswer>, ApiError> {
    let rooms = rooms(&app)?;
    crate::domain::validate_user_id(&body.user_id)?;
    guarded(&app, &parts, &id, &body.user_id).await?;
    Ok(Json(rooms.join(&id, &body.user_id).await?))
}

/// Where a user stands in a campaign's waiting room (public).
#[utoipa::path(
    get,
    path = "/v1/campaigns/{id}/queue/{user_id}",
    operation_id = "queue_status",
    tag = "waiting room",
    params(
        ("id" = String, Path, description = CAMPAIGN_ID),
        ("user_id" = String, Path, description = "The user, as it joined."),
        ("X-Seckill-User" = Option<String>, Header,
         description = "Signed identity token of `user_id`; required when the server has \
            `--user-signing-key`, ignored otherwise."),
    ),
    responses(
        (status = 200, description = "The user's place.", body = RoomAnswer),
        (status = 401, description = "A signed identity is required and missing or wrong.", body = ErrorBody),
        (status = 404, description = "No such campaign, no waiting room, or the user never joined.", body = ErrorBody),
        RateLimited,
    ),
)]
pub async fn status(
    State(app): State<AppState>,
    PathArg((id, user)): PathArg<(String, String)>,
    parts: Parts,
) -> Result<Json<RoomAnswer>, ApiError> {
    let rooms = rooms(&app)?;
    crate::domain::validate_user_id(&user)?;
    guarded(&app, &parts, &id, &user).await?;
    Ok(Json(rooms.status(&id, &user).await?))
}
