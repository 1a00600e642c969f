//! Route handlers: decode, validate, call the backend, encode. No business rules live here.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::extract::{Admin, Body, IdemHeader, PathArg, QueryArg};
use super::AppState;
use crate::domain::{
    AdminKey, CampaignView, Error, NewCampaign, NewCampaignBody, Order, OrderPage, OrderQuery,
    Restock, RestockBody, Status,
};

type Answer<T> = Result<Json<T>, ApiError>;

pub async fn create_campaign(
    _: Admin,
    State(app): State<AppState>,
    IdemHeader(key): IdemHeader,
    Body(body): Body<NewCampaignBody>,
) -> Result<(StatusCode, Json<CampaignView>), ApiError> {
    let campaign = NewCampaign::try_from(body)?;
    if campaign.hold_seconds.is_some() && !app.backend.supports_holds() {
        return Err(Error::invalid(
            "hold_seconds is not available in the scale-out deployment yet (see docs/HOLDS.md); \
             create the campaign without it, or use the embedded deployment",
        )
        .into());
    }
    let key = key.map(|k| AdminKey::create(k, &campaign));
    let view = app.backend.create_campaign(campaign, key).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

pub async fn get_campaign(
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<CampaignView> {
    Ok(Json(app.backend.campaign(&id).await?))
}

pub async fn restock(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    IdemHeader(key): IdemHeader,
    Body(body): Body<RestockBody>,
) -> Answer<CampaignView> {
    // Unknown campaign is 404 even when the body is also wrong.
    app.backend.campaign(&id).await?;
    let restock = Restock::try_from(body)?;
    let key = key.map(|k| AdminKey::restock(k, &id, &restock));
    Ok(Json(app.backend.restock(&id, restock, key).await?))
}

async fn set_status(
    app: AppState,
    id: String,
    status: Status,
    key: IdemHeader,
) -> Answer<CampaignView> {
    let key = key.0.map(|k| AdminKey::status(k, &id, status));
    Ok(Json(app.backend.set_status(&id, status, key).await?))
}

pub async fn pause(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    key: IdemHeader,
) -> Answer<CampaignView> {
    set_status(app, id, Status::Paused, key).await
}

pub async fn resume(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    key: IdemHeader,
) -> Answer<CampaignView> {
    set_status(app, id, Status::Active, key).await
}

pub async fn close(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    key: IdemHeader,
) -> Answer<CampaignView> {
    set_status(app, id, Status::Closed, key).await
}

pub async fn get_order(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<Order> {
    Ok(Json(app.backend.order(&id).await?))
}

pub async fn list_orders(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    QueryArg(query): QueryArg<OrderQuery>,
) -> Answer<OrderPage> {
    Ok(Json(app.backend.orders(&id, query).await?))
}

/// Cancel is idempotent by itself (a retry returns the cancelled order with its units back),
/// so an `Idempotency-Key` is validated but needs no record.
pub async fn cancel(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    _key: IdemHeader,
) -> Answer<Order> {
    Ok(Json(app.backend.cancel(&id).await?))
}

/// Confirm is idempotent by order id (a retry returns the confirmed order), so an
/// `Idempotency-Key` is validated but needs no record.
pub async fn confirm(
    _: Admin,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    _key: IdemHeader,
) -> Answer<Order> {
    Ok(Json(app.backend.confirm(&id).await?))
}

pub async fn healthz(State(app): State<AppState>) -> (StatusCode, Json<Value>) {
    let (status, mut body) = match app.backend.health().await {
        Ok(()) => {
            let mut body = json!({"status": "ok"});
            if let Some(lag) = app.backend.pipeline_lag().await {
                body["pipeline_lag"] = json!(lag);
            }
            (StatusCode::OK, body)
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "unavailable", "error": {"code": "internal", "message": e.to_string()}}),
        ),
    };
    if let Some(Value::Object(details)) = app.backend.health_details() {
        body.as_object_mut().expect("a JSON object").extend(details);
    }
    (status, Json(body))
}

pub async fn not_found() -> ApiError {
    Error::NotFound("no such route; see the API reference in the README".into()).into()
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request",
        "this route does not accept that method",
    )
}
