//! A claim is let in only once it has arrived: its body is read in full, under its own short
//! deadline, before the claim takes any place.
//!
//! Places (`--max-in-flight`, each client's share of them) are what the crowd competes for.
//! A request whose head arrived but whose body has not is no claim yet: if it took a place
//! first, one client sending complete heads with `Content-Length: 20` and no body held every
//! place until the request timeout (10 s), and every genuine claim was refused 503 — 102
//! bytes per place, about 410 requests a second to keep a default server shut. nginx reads
//! the body under `client_body_timeout` before proxying for the same reason. A claim's body is
//! at most 16 KiB and arrives with its head in practice; the deadline (2 s by default) only
//! bounds the memory a stalled body can hold, not a place.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::task::Poll;

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, Extensions, HeaderMap, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ApiError;
use super::AppState;

/// The largest claim body read; a larger one is refused 413 without reading it.
pub const MAX_CLAIM_BODY: usize = 16 * 1024;

/// The request with its body read in full, or the error to answer (nothing was changed).
pub async fn arrived(app: &AppState, req: Request) -> Result<Request, ApiError> {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_CLAIM_BODY as u64) {
        return Err(too_large());
    }
    let collect = Limited::new(body, MAX_CLAIM_BODY).collect();
    let mut collect = std::pin::pin!(collect);
    // The body nearly always came with the head: no timer for it then.
    let got = match futures::poll!(collect.as_mut()) {
        Poll::Ready(r) => r,
        Poll::Pending => {
            let within = app.guards.settings().claim_body_timeout;
            match tokio::time::timeout(within, collect).await {
                Ok(r) => r,
                Err(_) => return Err(late()),
            }
        }
    };
    match got {
        Ok(c) => Ok(Request::from_parts(
            parts,
            axum::body::Body::from(c.to_bytes()),
        )),
        Err(e) if e.is::<LengthLimitError>() => Err(too_large()),
        Err(e) if super::timed_body::is_timeout(&*e) => Err(late()),
        Err(e) => Err(ApiError::invalid(format!(
            "the request body could not be read: {e}"
        ))),
    }
}

/// The client address the per-address limits see: the socket peer, or what a trusted proxy
/// says it forwards for.
pub fn client_ip(app: &AppState, extensions: &Extensions, headers: &HeaderMap) -> IpAddr {
    // Served without connect info (a router driven in-process): no peer to key on.
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    app.guards.client_ip.resolve(peer, headers)
}

fn late() -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        "the request body did not arrive in time; nothing was changed",
    )
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "the request body is larger than this route accepts",
    )
}
