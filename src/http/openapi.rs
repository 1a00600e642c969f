//! The OpenAPI 3.1 document of the API, generated from the code, and its reference page.
//!
//! Every handler carries its `#[utoipa::path]` beside its code and every body and answer type
//! derives `ToSchema`, so the document cannot describe a route or a field the code does not
//! have. What the attributes would repeat on every operation is added here once, by
//! `Common`: the admin bearer scheme, the error answers every route can give (400, 401,
//! 408, 413, 503 with `Retry-After`) and the `RateLimit-*` headers of a 429. A test walks the
//! router and fails for any route missing from the document (`tests/it/openapi.rs`).
//!
//! The document is serialised once per process and served as constant bytes at
//! `GET /openapi.json`; the reference page at `/docs/` is Swagger UI, whose files are compiled
//! into the binary (`utoipa-swagger-ui` with `vendored`: no CDN, no download at build time).

use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::error::{ErrorBody, ErrorCode, ErrorDetail};
use super::health::{self, Health, HealthStatus};
pub use super::rate_limited::{rate_limited_response, RateLimited};
use super::{claim, events, guarded, locks, room, webhooks};
use super::{dashboard, handlers};
use crate::domain::{
    CampaignLimits, CampaignView, ClaimAnswer, ClaimRequest, Event, EventPage, EventType,
    JoinRequest, Kind, NewCampaignBody, Order, OrderPage, OrderState, Outcome, RefusedOrder,
    RefusedOrders, RestockBody, RoomAnswer, Status, WaitingRoom, WaitingRoomBody,
};

/// Name of the admin bearer security scheme in the document (the `security` of admin routes
/// spells it as a literal, which the attribute requires).
pub const ADMIN_SCHEME: &str = "admin_token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "seckill",
        description = "A flash-sale engine: never oversell, never hand out a code twice, never \
            let a user exceed the per-user limit, never lose an order once it answered `won`. \
            Bad input gets a 4xx with a JSON error and changes nothing. Admin routes need \
            `Authorization: Bearer <token>` of a token with the route's scope (admin, \
            confirm, read or locks; 403 names the one missing); with `--admin-listen` \
            they are served only on that address. Every answer carries `X-Request-Id`. \
            The reference text is docs/API.md.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        claim::claim,
        handlers::get_campaign,
        room::join,
        room::status,
        handlers::create_campaign,
        handlers::restock,
        handlers::pause,
        handlers::resume,
        handlers::close,
        handlers::list_orders,
        handlers::refused_orders,
        guarded::get_limits,
        guarded::put_limits,
        handlers::get_order,
        handlers::cancel,
        handlers::confirm,
        locks::acquire,
        locks::extend,
        locks::release,
        events::list_events,
        webhooks::create,
        webhooks::list,
        webhooks::get,
        webhooks::delete,
        webhooks::enable,
        webhooks::disable,
        webhooks::dead_letters,
        webhooks::replay,
        guarded::metrics,
        dashboard::page,
        dashboard::script,
        dashboard::style,
        dashboard::data,
        health::healthz,
        openapi_json,
        docs_index,
        docs_redirect,
    ),
    components(schemas(
        ErrorBody, ErrorDetail, ErrorCode, Outcome, Kind, Status, OrderState, ClaimRequest,
        ClaimAnswer, NewCampaignBody, RestockBody, CampaignView, Order, OrderPage,
        RefusedOrder, RefusedOrders, Event, EventPage, EventType, WaitingRoom, WaitingRoomBody,
        JoinRequest, RoomAnswer,
        CampaignLimits, Health, HealthStatus, locks::AcquireBody, locks::ExtendBody,
        locks::ReleaseBody, locks::Acquired, locks::Granted, locks::Held, locks::Released,
    )),
    modifiers(&Common),
    tags(
        (name = "claims", description = "The storm path: one claim, one outcome."),
        (name = "campaigns", description = "Campaigns: create, view, restock, pause, resume, close, rate limits."),
        (name = "orders", description = "Orders left by won claims."),
        (name = "waiting room", description = "A fair line in front of a sale: join, read your place, claim with the ticket once admitted."),
        (name = "events", description = "The event feed: every order transition and campaign change, in the ledger's order."),
        (name = "webhooks", description = "Webhook endpoints the event feed is delivered to, signed in the Standard Webhooks format, with their delivery state and dead letters."),
        (name = "locks", description = "Leases with fencing tokens for the services around a sale."),
        (name = "operations", description = "Health, metrics and this document."),
    ),
)]
pub struct ApiDoc;

/// The document as the server serves it: the derived one with the rules of
/// `openapi_rules.rs`.
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serialises");
    super::openapi_rules::apply(&mut doc);
    doc
}

/// Adds what every operation shares (see the module docs).
struct Common;

impl Modify for Common {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            ADMIN_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token of `--token NAME:SCOPE:SECRET`, the config file's `token` list \
                         or `--admin-token` (generated into `<data>/admin-token` when no token \
                         is configured). Scopes: `admin` (everything), `confirm` (confirming \
                         orders), `read` (every admin GET), `locks` (/v1/locks).",
                    ))
                    .build(),
            ),
        );
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ];
            for op in ops.into_iter().flatten() {
                let admin = op.security.as_ref().is_some_and(|s| !s.is_empty());
                let responses = &mut op.responses.responses;
                let mut add = |status: &str, description: &str| {
                    responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error_response(description, status));
                };
                if !op.operation_id.as_deref().is_some_and(is_static_route) {
                    add("400", "Malformed request: nothing was changed.");
                    add("413", "The body is larger than this route accepts.");
                    add(
                        "408",
                        "The body did not arrive in time: nothing was changed.",
                    );
                }
                if admin {
                    add("401", "Missing or wrong token: nothing was changed.");
                    add(
                        "403",
                        "The token lacks the scope this route needs (the message names it): \
                         nothing was changed.",
                    );
                }
                add(
                    "503",
                    "Overloaded, or a dependency is unavailable. `error.outcome: \"unknown\"` \
                     and `Seckill-Outcome: unknown` mean the request may have taken effect \
                     (retry with the same Idempotency-Key to learn).",
                );
                for r in responses.values_mut() {
                    if let RefOr::T(r) = r {
                        r.headers
                            .insert("X-Request-Id".to_owned(), request_id_header().into());
                    }
                }
            }
        }
    }
}

/// Routes with no input to refuse (no path parameter, body or query).
fn is_static_route(operation_id: &str) -> bool {
    matches!(
        operation_id,
        "healthz"
            | "metrics"
            | "openapi_json"
            | "docs_index"
            | "docs_redirect"
            | "dashboard"
            | "dashboard_js"
            | "dashboard_css"
            | "dashboard_data"
    )
}

/// `X-Request-Id`, on every answer.
fn request_id_header() -> utoipa::openapi::Header {
    HeaderBuilder::new()
        .schema(Some(
            utoipa::openapi::ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::Type::String)
                .min_length(Some(1))
                .max_length(Some(super::request_id::MAX_LEN)),
        ))
        .description(Some(
            "The request's id: its own X-Request-Id (1 to 128 visible ASCII characters) or a \
             generated one; in the request's log lines and error body too.",
        ))
        .build()
}

/// An error answer with the JSON error body and the headers its status carries.
fn error_response(description: &str, status: &str) -> RefOr<utoipa::openapi::Response> {
    let mut r = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("ErrorBody")))
            .build(),
    );
    let int = || utoipa::openapi::schema::Type::Integer;
    if status == "503" || status == "429" {
        r = r.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(
                    utoipa::openapi::ObjectBuilder::new().schema_type(int()),
                ))
                .description(Some("Seconds to wait before retrying."))
                .build(),
        );
    }
    if status == "503" {
        r = r.header(
            "Seckill-Outcome",
            HeaderBuilder::new()
                .schema(Some(
                    utoipa::openapi::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::schema::Type::String)
                        .enum_values(Some(["unknown"])),
                ))
                .description(Some("Present when the request may have taken effect."))
                .build(),
        );
    }
    r.build().into()
}

/// The serialised document, built once per process.
#[derive(Clone)]
pub struct DocumentBytes(Bytes);

impl DocumentBytes {
    pub fn new() -> Self {
        static JSON: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
        let json = JSON.get_or_init(|| {
            Bytes::from(serde_json::to_vec(&document()).expect("a JSON value serialises"))
        });
        Self(json.clone())
    }
}

impl Default for DocumentBytes {
    fn default() -> Self {
        Self::new()
    }
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi_json",
    tag = "operations",
    responses((status = 200, description = "This document.", content_type = "application/json", body = Object)),
)]
pub async fn openapi_json(
    axum::extract::State(doc): axum::extract::State<DocumentBytes>,
) -> Response {
    let mut resp = Response::new(axum::body::Body::from(doc.0));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The interactive reference page (Swagger UI, served from the binary).
#[utoipa::path(
    get,
    path = "/docs/",
    operation_id = "docs_index",
    tag = "operations",
    responses((status = 200, description = "The reference page.", content_type = "text/html", body = String)),
)]
#[allow(dead_code)] // documents the page of `docs_router`
async fn docs_index() {}

/// Redirects to `/docs/` (the page's files are relative to it).
#[utoipa::path(
    get,
    path = "/docs",
    operation_id = "docs_redirect",
    tag = "operations",
    responses((status = 303, description = "See `/docs/`.", headers(("location" = String, description = "`/docs/`")))),
)]
#[allow(dead_code)] // documents the redirect of `docs_router`
async fn docs_redirect() {}

/// `/openapi.json` and the reference page under `/docs`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    use utoipa_swagger_ui::{Config, SwaggerUi};
    let config = Config::new(["/openapi.json"])
        // No validator badge: it would make the browser call an outside service.
        .validator_url("none")
        .try_it_out_enabled(true)
        .persist_authorization(false);
    let docs: Router<S> = SwaggerUi::new("/docs").config(config).into();
    let json = Router::new()
        .route("/openapi.json", axum::routing::get(openapi_json))
        .with_state(DocumentBytes::new());
    docs.merge(json)
}
