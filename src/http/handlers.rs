//! Route handlers: decode, validate, call the backend, encode. No business rules live here.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::extract::{Body, Caller, IdemHeader, PathArg, QueryArg};
use super::AppState;
use crate::domain::{
    AdminKey, CampaignView, Error, NewCampaign, NewCampaignBody, Order, OrderPage, OrderQuery,
    RefusedOrders, Restock, RestockBody, Status,
};

/// The optional `Idempotency-Key` of an admin write.
pub const ADMIN_IDEMPOTENCY_KEY: &str =
    "1–255 visible ASCII characters. A retry with the same key and the same request changes \
     nothing more and answers the campaign's current state; the same key with a different \
     request is 409.";

/// A campaign id in a path.
pub const CAMPAIGN_ID: &str = "Campaign id: 1–64 characters of `[A-Za-z0-9_-]`.";

type Answer<T> = Result<Json<T>, ApiError>;

/// Create a campaign (one of `stock` or `codes`).
#[utoipa::path(
    post,
    path = "/v1/campaigns",
    operation_id = "create_campaign",
    tag = "campaigns",
    security(("admin_token" = [])),
    params(("Idempotency-Key" = Option<String>, Header, description = ADMIN_IDEMPOTENCY_KEY, min_length = 1, max_length = 255)),
    request_body = NewCampaignBody,
    responses(
        (status = 201, description = "Created.", body = CampaignView),
        (status = 409, description = "The id exists, or the Idempotency-Key was used for another request.", body = ErrorBody),
    ),
)]
pub async fn create_campaign(
    _: Caller,
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
    if campaign.waiting_room.is_some() && app.rooms.is_none() {
        return Err(Error::invalid(
            "this server has no waiting rooms; create the campaign without one",
        )
        .into());
    }
    let key = key.map(|k| AdminKey::create(k, &campaign));
    let view = app.backend.create_campaign(campaign, key).await?;
    app.guards.board.add_known(&view.id);
    Ok((StatusCode::CREATED, Json(view)))
}

/// The campaign view (public).
#[utoipa::path(
    get,
    path = "/v1/campaigns/{id}",
    operation_id = "get_campaign",
    tag = "campaigns",
    params(("id" = String, Path, description = CAMPAIGN_ID)),
    responses(
        (status = 200, description = "The campaign.", body = CampaignView),
        (status = 404, description = "No such campaign.", body = ErrorBody),
    ),
)]
pub async fn get_campaign(
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<CampaignView> {
    Ok(Json(app.backend.campaign(&id).await?))
}

/// Add units (stock campaigns) or codes (code campaigns) to `total` and `remaining`.
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/restock",
    operation_id = "restock",
    tag = "campaigns",
    security(("admin_token" = [])),
    params(
        ("id" = String, Path, description = CAMPAIGN_ID),
        ("Idempotency-Key" = Option<String>, Header, description = ADMIN_IDEMPOTENCY_KEY, min_length = 1, max_length = 255),
    ),
    request_body = RestockBody,
    responses(
        (status = 200, description = "Restocked; the campaign.", body = CampaignView),
        (status = 404, description = "No such campaign.", body = ErrorBody),
        (status = 409, description = "A code the campaign already has, or the Idempotency-Key was used for another request.", body = ErrorBody),
    ),
)]
pub async fn restock(
    _: Caller,
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

/// Stop selling: no claim wins after this answer.
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/pause",
    operation_id = "pause",
    tag = "campaigns",
    security(("admin_token" = [])),
    params(
        ("id" = String, Path, description = CAMPAIGN_ID),
        ("Idempotency-Key" = Option<String>, Header, description = ADMIN_IDEMPOTENCY_KEY, min_length = 1, max_length = 255),
    ),
    responses(
        (status = 200, description = "The campaign with its new status.", body = CampaignView),
        (status = 404, description = "No such campaign.", body = ErrorBody),
        (status = 409, description = "The campaign is closed, or the Idempotency-Key was used for another request.", body = ErrorBody),
    ),
)]
pub async fn pause(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    key: IdemHeader,
) -> Answer<CampaignView> {
    set_status(app, id, Status::Paused, key).await
}

/// Sell again (a closed campaign stays closed: 409).
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/resume",
    operation_id = "resume",
    tag = "campaigns",
    security(("admin_token" = [])),
    params(
        ("id" = String, Path, description = CAMPAIGN_ID),
        ("Idempotency-Key" = Option<String>, Header, description = ADMIN_IDEMPOTENCY_KEY, min_length = 1, max_length = 255),
    ),
    responses(
        (status = 200, description = "The campaign with its new status.", body = CampaignView),
        (status = 404, description = "No such campaign.", body = ErrorBody),
        (status = 409, description = "The campaign is closed, or the Idempotency-Key was used for another request.", body = ErrorBody),
    ),
)]
pub async fn resume(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    key: IdemHeader,
) -> Answer<CampaignView> {
    set_status(app, id, Status::Active, key).await
}

/// Stop selling for good: no claim wins after this answer.
#[utoipa::path(
    post,
    path = "/v1/campaigns/{id}/close",
    operation_id = "close",
    tag = "campaigns",
    security(("admin_token" = [])),
    params(
        ("id" = String, Path, description = CAMPAIGN_ID),
        ("Idempotency-Key" = Option<String>, Header, description = ADMIN_IDEMPOTENCY_KEY, min_length = 1, max_length = 255),
    ),
    responses(
        (status = 200, description = "The campaign with its new status.", body = CampaignView),
        (status = 404, description = "No such campaign.", body = ErrorBody),
        (status = 409, description = "The campaign is closed, or the Idempotency-Key was used for another request.", body = ErrorBody),
    ),
)]
pub async fn close(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    key: IdemHeader,
) -> Answer<CampaignView> {
    set_status(app, id, Status::Closed, key).await
}

/// One order.
#[utoipa::path(
    get,
    path = "/v1/orders/{id}",
    operation_id = "get_order",
    tag = "orders",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = "Order id: `<campaign id>-<n>`.")),
    responses(
        (status = 200, description = "The order.", body = Order),
        (status = 404, description = "No such order.", body = ErrorBody),
    ),
)]
pub async fn get_order(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<Order> {
    Ok(Json(app.backend.order(&id).await?))
}

/// A page of a campaign's orders, oldest first.
#[utoipa::path(
    get,
    path = "/v1/campaigns/{id}/orders",
    operation_id = "list_orders",
    tag = "orders",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = CAMPAIGN_ID), OrderQuery),
    responses(
        (status = 200, description = "A page of orders.", body = OrderPage),
        (status = 404, description = "No such campaign.", body = ErrorBody),
    ),
)]
pub async fn list_orders(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    QueryArg(query): QueryArg<OrderQuery>,
) -> Answer<OrderPage> {
    Ok(Json(app.backend.orders(&id, query).await?))
}

#[utoipa::path(
    get,
    path = "/v1/campaigns/{id}/refused-orders",
    operation_id = "list_refused_orders",
    tag = "orders",
    security(("admin_token" = [])),
    params(("id" = String, Path, description = CAMPAIGN_ID)),
    responses(
        (status = 200, description = "Wins the ledger did not take, oldest first (at most 1000): the buyers told `won` whose order does not exist. Scale-out only; the embedded deployment lists none.", body = RefusedOrders),
        (status = 404, description = "No such campaign.", body = ErrorBody),
    ),
)]
pub async fn refused_orders(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
) -> Answer<RefusedOrders> {
    Ok(Json(app.backend.refused_orders(&id).await?))
}

/// Cancel is idempotent by itself (a retry returns the cancelled order with its units back),
/// so an `Idempotency-Key` is validated but needs no record.
#[utoipa::path(
    post,
    path = "/v1/orders/{id}/cancel",
    operation_id = "cancel",
    tag = "orders",
    security(("admin_token" = [])),
    params(
        ("id" = String, Path, description = "Order id: `<campaign id>-<n>`."),
        ("Idempotency-Key" = Option<String>, Header, description = "Validated; cancel is idempotent by itself.", min_length = 1, max_length = 255),
    ),
    responses(
        (status = 200, description = "The order, `cancelled`; its units, codes and allowance are back. Cancelling twice returns the same order.", body = Order),
        (status = 404, description = "No such order.", body = ErrorBody),
    ),
)]
pub async fn cancel(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    _key: IdemHeader,
) -> Answer<Order> {
    Ok(Json(app.backend.cancel(&id).await?))
}

/// Confirm is idempotent by order id (a retry returns the confirmed order), so an
/// `Idempotency-Key` is validated but needs no record.
#[utoipa::path(
    post,
    path = "/v1/orders/{id}/confirm",
    operation_id = "confirm",
    tag = "orders",
    summary = "Confirm a pending order (the payment system's callback)",
    description = "A `pending` order whose `pay_by` has not passed becomes `confirmed`. \
        Confirming a `confirmed` order returns it again, so a payment callback may retry \
        freely. An `expired` or `cancelled` order, or one whose `pay_by` has passed (even if \
        its expiry is not processed yet), answers 409 and nothing changes; an order of a \
        campaign without `hold_seconds` answers 400.",
    security(("admin_token" = [])),
    params(
        ("id" = String, Path, description = "Order id: `<campaign id>-<n>`."),
        ("Idempotency-Key" = Option<String>, Header, description = "Validated; confirm is idempotent by order id.", min_length = 1, max_length = 255),
    ),
    responses(
        (status = 200, description = "The order, `confirmed`.", body = Order),
        (status = 400, description = "The order's campaign has no holds.", body = ErrorBody),
        (status = 404, description = "No such order.", body = ErrorBody),
        (status = 409, description = "The order is expired or cancelled, or its `pay_by` has passed.", body = ErrorBody),
    ),
)]
pub async fn confirm(
    _: Caller,
    State(app): State<AppState>,
    PathArg(id): PathArg<String>,
    _key: IdemHeader,
) -> Answer<Order> {
    Ok(Json(app.backend.confirm(&id).await?))
}

pub async fn not_found() -> ApiError {
    Error::NotFound("no such route; see /docs/ or /openapi.json for the API".into()).into()
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request",
        "this route does not accept that method",
    )
}
