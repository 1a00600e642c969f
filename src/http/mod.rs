//! The HTTP API of `docs/API.md` on axum.
//!
//! [`routers`] builds the routes over any [`Backend`] behind the guards of `crate::guard`:
//! public routes (claims, campaign view) pass the shedding middleware, admin routes and
//! `/healthz` do not, so they keep answering during a claim storm. With a separate admin
//! listener the admin routes exist only there (404 on the public one). [`serve_all`] runs the
//! listeners until a shutdown future resolves, lets in-flight requests finish and flushes the
//! backend; the connections themselves are accepted and bounded by [`listener`]. On the
//! public listener the claim route is served before the router by `fast` (same answers, a
//! fraction of the cost; see there). Every route is described in the OpenAPI document of
//! [`openapi`] (`GET /openapi.json`, page at `/docs/`).

mod arrival;
pub mod auth;
mod claim;
pub mod claim_body;
mod dashboard;
mod error;
mod events;
mod extract;
mod fast;
pub mod fd_limit;
mod guarded;
mod handlers;
mod health;
pub mod listener;
mod locks;
pub mod openapi;
mod openapi_rules;
mod rate_limited;
mod refusals;
pub mod request_id;
mod room;
mod timed;
mod timed_body;
mod watchdog;
mod webhooks;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use fast::FastClaims;
pub use listener::ConnLimits;

use crate::engine::backend::Backend;
use crate::guard::soldout::StockBoard;
use crate::guard::{GuardSettings, Guards};

pub use auth::Credentials;

/// Limits of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest body of campaign creation and restock (code lists can be large).
    pub max_admin_body: usize,
    /// Largest body of every other route.
    pub max_body: usize,
    /// The lock service of `/v1/locks` (none: 404): the deployment's own, or Redlock
    /// (`--lock-redis`).
    pub locks: Option<crate::lock::Locks>,
    /// The event feed of `/v1/events` (none: 404).
    pub feed: Option<Arc<crate::feed::Feed>>,
    /// Event delivery, managed through `/v1/webhooks` (none: 404).
    pub delivery: Option<Arc<crate::delivery::Delivery>>,
    /// The waiting rooms (none: campaigns cannot have one, and the queue routes are 404).
    pub rooms: Option<Arc<crate::room::Rooms>>,
    /// Serve the claim route before the router on the public listener (`fast`); off, every
    /// request goes through the router (the tests compare the two).
    pub fast_claims: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            max_admin_body: 256 * 1024 * 1024,
            max_body: 16 * 1024,
            locks: None,
            feed: None,
            delivery: None,
            rooms: None,
            fast_claims: true,
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn Backend>,
    /// The valid tokens and their scopes.
    pub credentials: Credentials,
    pub guards: Arc<Guards>,
    /// The lock service of `/v1/locks` (none: 404).
    pub locks: Option<crate::lock::Locks>,
    /// The event feed of `/v1/events` (none: 404).
    pub feed: Option<Arc<crate::feed::Feed>>,
    /// Event delivery of `/v1/webhooks` (none: 404).
    pub delivery: Option<Arc<crate::delivery::Delivery>>,
    /// The waiting rooms (none: 404).
    pub rooms: Option<Arc<crate::room::Rooms>>,
}

/// The routes of one instance: everything on `public`, or the admin routes on `admin`; `fast`
/// serves the claim route before the public router (unless `HttpOptions::fast_claims` is off).
pub struct Routers {
    pub public: Router,
    pub admin: Option<Router>,
    pub fast: Option<FastClaims>,
}

/// All routes of the API over `backend` on one listener, with default guards (only
/// shedding and the request timeout on; see [`GuardSettings`]) answering from `board`.
pub fn router(
    backend: Arc<dyn Backend>,
    board: Arc<StockBoard>,
    credentials: Credentials,
    opts: &HttpOptions,
) -> Router {
    let guards =
        Guards::new(GuardSettings::default(), board).expect("default guard settings are valid");
    routers(backend, credentials, opts, guards, false).public
}

/// The routes over `backend` behind `guards`; `split_admin` puts the admin routes on a router
/// of their own (for `--admin-listen`).
pub fn routers(
    backend: Arc<dyn Backend>,
    credentials: Credentials,
    opts: &HttpOptions,
    guards: Arc<Guards>,
    split_admin: bool,
) -> Routers {
    use handlers::*;
    let big = DefaultBodyLimit::max(opts.max_admin_body);
    let locks = opts.locks.clone();
    let state = AppState {
        backend,
        credentials,
        guards,
        locks,
        feed: opts.feed.clone(),
        delivery: opts.delivery.clone(),
        rooms: opts.rooms.clone(),
    };
    let timed = || axum::middleware::from_fn_with_state(state.clone(), timed::timed);
    // Claims shed inline (the storm path) and time themselves; the campaign view through the
    // middlewares.
    let public = Router::new()
        .route(
            "/v1/campaigns/{id}",
            get(get_campaign)
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    guarded::shed,
                ))
                .layer(timed()),
        )
        .route("/v1/campaigns/{id}/claims", post(claim::claim))
        .route(
            "/v1/campaigns/{id}/queue",
            post(room::join)
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    guarded::shed,
                ))
                .layer(timed()),
        )
        .route(
            "/v1/campaigns/{id}/queue/{user_id}",
            get(room::status)
                .layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    guarded::shed,
                ))
                .layer(timed()),
        );
    let admin = Router::new()
        .route("/v1/campaigns", post(create_campaign).layer(big))
        .route("/v1/campaigns/{id}/restock", post(restock).layer(big))
        .route("/v1/campaigns/{id}/pause", post(pause))
        .route("/v1/campaigns/{id}/resume", post(resume))
        .route("/v1/campaigns/{id}/close", post(close))
        .route("/v1/campaigns/{id}/orders", get(list_orders))
        .route("/v1/campaigns/{id}/refused-orders", get(refused_orders))
        .route(
            "/v1/campaigns/{id}/limits",
            get(guarded::get_limits).put(guarded::put_limits),
        )
        .route("/v1/orders/{id}", get(get_order))
        .route("/v1/orders/{id}/cancel", post(cancel))
        .route("/v1/orders/{id}/confirm", post(confirm))
        .route(
            "/v1/locks/{name}",
            post(locks::acquire).delete(locks::release),
        )
        .route("/v1/locks/{name}/extend", post(locks::extend))
        .route("/v1/events", get(events::list_events))
        .route("/v1/webhooks", get(webhooks::list).post(webhooks::create))
        .route(
            "/v1/webhooks/{id}",
            get(webhooks::get).delete(webhooks::delete),
        )
        .route("/v1/webhooks/{id}/enable", post(webhooks::enable))
        .route("/v1/webhooks/{id}/disable", post(webhooks::disable))
        .route(
            "/v1/webhooks/{id}/dead-letters",
            get(webhooks::dead_letters),
        )
        .route("/v1/webhooks/{id}/replay", post(webhooks::replay))
        .route("/metrics", get(guarded::metrics))
        .route("/dashboard", get(dashboard::page))
        .route("/dashboard/dashboard.js", get(dashboard::script))
        .route("/dashboard/dashboard.css", get(dashboard::style))
        .route("/dashboard/data", get(dashboard::data))
        .route_layer(timed());
    // Health, the OpenAPI document and its reference page: on every listener, unshed.
    let health = Router::new()
        .route("/healthz", get(health::healthz))
        .route_layer(timed())
        .merge(openapi::router());
    let finish = |r: Router<AppState>| {
        r.fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(opts.max_body))
            .layer(TraceLayer::new_for_http().on_failure(refusals::Refusals))
            .layer(CatchPanicLayer::custom(|_| panic_answer()))
            .with_state(state.clone())
    };
    let fast = opts
        .fast_claims
        .then(|| FastClaims::new(state.clone(), opts.max_body));
    if split_admin {
        // Operators read campaigns on the admin listener too, outside the shedding bound.
        let admin = admin
            .route("/v1/campaigns/{id}", get(get_campaign).layer(timed()))
            .merge(health.clone());
        Routers {
            public: finish(public.merge(health)),
            admin: Some(finish(admin)),
            fast,
        }
    } else {
        Routers {
            public: finish(public.merge(admin).merge(health)),
            admin: None,
            fast,
        }
    }
}

/// The 500 of a request whose handler panicked (the router's catch-panic layer and the fast
/// path's).
pub(crate) fn panic_answer() -> axum::response::Response {
    axum::response::IntoResponse::into_response(ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "unexpected server error",
    ))
}

/// Most connections of the admin listener: operators and scrapers, not the crowd. Kept apart
/// from the public cap so a flood of the public listener never locks the operator out.
pub const ADMIN_MAX_CONNECTIONS: usize = 256;

/// Serves `router` on `listener` until `shutdown` resolves; then waits for in-flight requests
/// and flushes `backend`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_all(
        listener,
        router,
        None,
        None,
        backend,
        ConnLimits::default(),
        shutdown,
    )
    .await
}

/// [`serve`] with the public listener's fast claim path, an optional admin listener and the
/// public listener's connection limits; both listeners stop on `shutdown`.
pub async fn serve_all(
    listener: TcpListener,
    router: Router,
    fast: Option<FastClaims>,
    admin: Option<(TcpListener, Router)>,
    backend: Arc<dyn Backend>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let admin_task = match admin {
        Some((listener, router)) => {
            let addr: SocketAddr = listener.local_addr()?;
            tracing::info!(%addr, "seckill admin routes on http://{addr}");
            let admin_limits = ConnLimits {
                max_connections: ADMIN_MAX_CONNECTIONS,
                per_ip: None,
                ..limits.clone()
            };
            let fut = listener::serve(listener, router, None, admin_limits, "admin", stopped());
            Some(tokio::spawn(fut))
        }
        None => None,
    };
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(
        %addr,
        head_timeout = ?limits.head_timeout,
        idle_timeout = ?limits.idle_timeout,
        body_timeout = ?limits.body_timeout,
        max_connections = limits.max_connections,
        "seckill listening on http://{addr}"
    );
    let fast = fast.map(Arc::new);
    listener::serve(listener, router, fast, limits, "public", stopped()).await;
    if let Some(task) = admin_task {
        task.await?;
    }
    tracing::info!("no more requests in flight; flushing");
    backend.shutdown().await;
    tracing::info!("shut down cleanly");
    Ok(())
}
