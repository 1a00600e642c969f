//! The HTTP API of `shared/API.md` on axum.
//!
//! [`router`] builds the routes over any [`Backend`]; [`serve`] runs them on a listener until a
//! shutdown future resolves, then lets in-flight requests finish and flushes the backend.

mod error;
mod extract;
mod handlers;

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

use crate::backend::Backend;

/// The admin bearer token. Never printed by `Debug`.
#[derive(Clone)]
pub struct AdminToken(Arc<str>);

impl AdminToken {
    pub fn new(token: &str) -> Self {
        Self(token.into())
    }

    /// Constant-time comparison, so response timing reveals nothing about the token.
    pub fn matches(&self, candidate: &str) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(candidate.as_bytes()).into()
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

/// Limits of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest body of campaign creation and restock (code lists can be large).
    pub max_admin_body: usize,
    /// Largest body of every other route.
    pub max_body: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            max_admin_body: 256 * 1024 * 1024,
            max_body: 16 * 1024,
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn Backend>,
    pub admin_token: AdminToken,
}

/// All routes of the API over `backend`.
pub fn router(backend: Arc<dyn Backend>, admin_token: AdminToken, opts: &HttpOptions) -> Router {
    use handlers::*;
    let big = DefaultBodyLimit::max(opts.max_admin_body);
    let state = AppState {
        backend,
        admin_token,
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/campaigns", post(create_campaign).layer(big))
        .route("/v1/campaigns/{id}", get(get_campaign))
        .route("/v1/campaigns/{id}/restock", post(restock).layer(big))
        .route("/v1/campaigns/{id}/pause", post(pause))
        .route("/v1/campaigns/{id}/resume", post(resume))
        .route("/v1/campaigns/{id}/close", post(close))
        .route("/v1/campaigns/{id}/claims", post(claim))
        .route("/v1/campaigns/{id}/orders", get(list_orders))
        .route("/v1/orders/{id}", get(get_order))
        .route("/v1/orders/{id}/cancel", post(cancel))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(opts.max_body))
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "unexpected server error",
            ))
        }))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves; then waits for in-flight requests
/// and flushes `backend`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    backend: Arc<dyn Backend>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "seckill listening on http://{addr}");
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await?;
    tracing::info!("no more requests in flight; flushing");
    backend.shutdown().await;
    tracing::info!("shut down cleanly");
    Ok(())
}
