//! `/v1/webhooks` (admin): the webhook endpoints the event feed is delivered to — add, list,
//! remove, disable and enable them, read and replay their dead letters. Endpoints given by
//! `--webhook` are listed too (`origin: flag`). Every refusal is the API's JSON error and
//! changes nothing.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Caller, PathArg};
use super::AppState;
use crate::delivery::view::{DeadLetterList, Endpoint, EndpointList, NewEndpoint, Replaying};
use crate::delivery::Delivery;
use crate::domain::Error;
use crate::ledger::sinks::{NewSink, SinkKind, SinkRow};

type Answer<T> = Result<Json<T>, ApiError>;

fn delivery(app: &AppState) -> Result<&std::sync::Arc<Delivery>, ApiError> {
    app.delivery.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server delivers no events".to_owned(),
        )
    })
}

fn failed(e: anyhow::Error) -> Error {
    Error::unavailable(
        "reading or writing the webhook endpoints failed",
        format!("{e:#}"),
    )
}

/// The endpoint `id` (a webhook, not a NATS sink), or 404.
async fn endpoint(d: &Delivery, id: &str) -> Result<SinkRow, Error> {
    match d.ledger().sink(id).await.map_err(failed)? {
        Some(row) if row.kind() == SinkKind::Webhook => Ok(row),
        _ => Err(Error::NotFound(format!(
            "webhook endpoint '{id}' does not exist"
        ))),
    }
}

async fn view(d: &Delivery, row: SinkRow) -> Result<Endpoint, Error> {
    let head = d.feed().head().await.map_err(failed)?;
    Ok(Endpoint::of(
        row,
        head,
        crate::clock::now().timestamp_micros(),
    ))
}

#[utoipa::path(
    post,
    path = "/v1/webhooks",
    operation_id = "create_webhook",
    tag = "webhooks",
    security(("admin_token" = [])),
    request_body = NewEndpoint,
    responses(
        (status = 201, description = "The endpoint, with its secret (shown only here). It receives every event written from now on.", body = Endpoint),
        (status = 400, description = "A bad URL, secret or description.", body = ErrorBody),
    ),
)]
pub async fn create(
    _: Caller,
    State(app): State<AppState>,
    Body(new): Body<NewEndpoint>,
) -> Result<(StatusCode, Json<Endpoint>), ApiError> {
    let d = delivery(&app)?;
    new.check()?;
    let secret = new
        .secret
        .clone()
        .unwrap_or_else(crate::delivery::sign::Key::generate);
    let sink = NewSink {
        id: crate::delivery::new_sink_id(),
        kind: SinkKind::Webhook,
        target: new.url,
        subject: None,
        secret: Some(secret.clone()),
        origin: "api",
        description: new.description,
    };
    let head = d.feed().head().await.map_err(failed)?;
    let now = crate::clock::now().timestamp_micros();
    if !d
        .ledger()
        .put_sink(&sink, head, now)
        .await
        .map_err(failed)?
    {
        return Err(Error::Conflict("an endpoint with this id exists; retry".into()).into());
    }
    tracing::info!(endpoint = %sink.id, url = %sink.target, "webhook endpoint added");
    d.rescan();
    let mut shown = view(d, endpoint(d, &sink.id).await?).await?;
    shown.secret = Some(secret);
    Ok((StatusCode::CREATED, Json(shown)))
}

#[utoipa::path(
    get,
    path = "/v1/webhooks",
    operation_id = "list_webhooks",
    tag = "webhooks",
    security(("admin_token" = [])),
    responses((status = 200, description = "Every webhook endpoint, oldest first, with its delivery state.", body = EndpointList)),
)]
pub async fn list(_: Caller, State(app): State<AppState>) -> Answer<EndpointList> {
    let d = delivery(&app)?;
    let head = d.feed().head().await.map_err(failed)?;
    let now = crate::clock::now().timestamp_micros();
    let rows = d.ledger().sinks().await.map_err(failed)?;
    let endpoints = rows
        .into_iter()
        .filter(|r| r.kind() == SinkKind::Webhook)
        .map(|r| Endpoint::of(r, head, now))
        .collect();
    Ok(Json(EndpointList { endpoints }))
}

#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}",
    operation_id = "get_webhook",
    tag = "webhooks",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = "Endpoint id (`whk_…`).")),
    responses(
        (status = 200, description = "The endpoint and its delivery state.", body = Endpoint),
        (status = 404, description = "No such endpoint.", body = ErrorBody),
    ),
)]
pub async fn get(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<Endpoint> {
    let d = delivery(&app)?;
    Ok(Json(view(d, endpoint(d, &id).await?).await?))
}

#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    operation_id = "delete_webhook",
    tag = "webhooks",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = "Endpoint id.")),
    responses(
        (status = 204, description = "Removed with its parked events and dead letters; nothing more is sent to it. An endpoint of `--webhook` comes back when an instance starts with that flag."),
        (status = 404, description = "No such endpoint.", body = ErrorBody),
    ),
)]
pub async fn delete(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Result<StatusCode, ApiError> {
    let d = delivery(&app)?;
    endpoint(d, &id).await?;
    d.ledger().delete_sink(&id).await.map_err(failed)?;
    tracing::info!(endpoint = %id, "webhook endpoint removed");
    d.rescan();
    Ok(StatusCode::NO_CONTENT)
}

async fn set_enabled(app: &AppState, id: &str, enabled: bool) -> Answer<Endpoint> {
    let d = delivery(app)?;
    endpoint(d, id).await?;
    let reason = (!enabled).then_some("disabled through POST /v1/webhooks/{id}/disable");
    d.ledger()
        .set_enabled(id, enabled, reason)
        .await
        .map_err(failed)?;
    tracing::info!(endpoint = %id, enabled, "webhook endpoint {}", if enabled { "enabled" } else { "disabled" });
    d.rescan();
    Ok(Json(view(d, endpoint(d, id).await?).await?))
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/enable",
    operation_id = "enable_webhook",
    tag = "webhooks",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = "Endpoint id.")),
    responses(
        (status = 200, description = "Enabled: delivery resumes after its cursor, so the events written while it was disabled follow (those retention kept).", body = Endpoint),
        (status = 404, description = "No such endpoint.", body = ErrorBody),
    ),
)]
pub async fn enable(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<Endpoint> {
    set_enabled(&app, &id, true).await
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/disable",
    operation_id = "disable_webhook",
    tag = "webhooks",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = "Endpoint id.")),
    responses(
        (status = 200, description = "Disabled: nothing is sent until it is enabled again; its cursor stays.", body = Endpoint),
        (status = 404, description = "No such endpoint.", body = ErrorBody),
    ),
)]
pub async fn disable(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<Endpoint> {
    set_enabled(&app, &id, false).await
}

#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/dead-letters",
    operation_id = "list_dead_letters",
    tag = "webhooks",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = "Endpoint id.")),
    responses(
        (status = 200, description = "Up to 1,000 events the endpoint never took, oldest first, each as it was sent: those retried for --webhook-max-age and the later events of their orders.", body = DeadLetterList),
        (status = 404, description = "No such endpoint.", body = ErrorBody),
    ),
)]
pub async fn dead_letters(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<DeadLetterList> {
    let d = delivery(&app)?;
    endpoint(d, &id).await?;
    let letters = d.ledger().dead_letters(&id, 1000).await.map_err(failed)?;
    Ok(Json(DeadLetterList {
        dead_letters: letters.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/replay",
    operation_id = "replay_dead_letters",
    tag = "webhooks",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = "Endpoint id.")),
    responses(
        (status = 202, description = "Every dead letter of the endpoint is retried again with its id and body, each order's in order (within a few seconds, by the instance delivering it), for up to --webhook-max-age; those taken are removed.", body = Replaying),
        (status = 404, description = "No such endpoint.", body = ErrorBody),
    ),
)]
pub async fn replay(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Result<(StatusCode, Json<Replaying>), ApiError> {
    let d = delivery(&app)?;
    endpoint(d, &id).await?;
    let replaying = d
        .ledger()
        .replay(&id, crate::clock::now().timestamp_micros())
        .await
        .map_err(failed)?;
    tracing::info!(endpoint = %id, replaying, "dead letters queued for replay");
    Ok((StatusCode::ACCEPTED, Json(Replaying { replaying })))
}
