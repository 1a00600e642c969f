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
//! bounds how long a stalled body holds its memory, not a place. Bodies that did not come with
//! their heads are read at most `--max-in-flight` at a time (beyond it 503 at once) and copied
//! into one buffer as they come, so slow bodies hold at most 16 KiB each.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::task::Poll;

use axum::extract::{ConnectInfo, Request};
use axum::http::request::Parts;
use axum::http::{header, Extensions, HeaderMap};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use super::error::ApiError;
use super::extract::{body_late, body_too_large};
use super::AppState;

/// The largest claim body read; a larger one is refused 413 without reading it.
pub const MAX_CLAIM_BODY: usize = 16 * 1024;

/// The request's head and its body read in full, or the error to answer (nothing was changed).
pub async fn arrived(app: &AppState, req: Request) -> Result<(Parts, Bytes), ApiError> {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_CLAIM_BODY as u64) {
        return Err(body_too_large());
    }
    let capacity = declared.map_or(256, |n| n as usize);
    let mut read = std::pin::pin!(read(body, capacity));
    // The body nearly always came with the head: no timer and no waiting place for it then.
    let got = match futures::poll!(read.as_mut()) {
        Poll::Ready(r) => r,
        Poll::Pending => {
            let g = &app.guards;
            let Ok(_waiting) = g.arriving.try_acquire() else {
                return Err(ApiError::overloaded(
                    "too many request bodies are still arriving; retry shortly",
                ));
            };
            match tokio::time::timeout(g.settings().claim_body_timeout, read).await {
                Ok(r) => r,
                Err(_) => return Err(body_late()),
            }
        }
    };
    Ok((parts, got?))
}

/// Reads the body into one buffer, chunk by chunk: each chunk is copied and dropped at once (a
/// body sent a byte at a time must not keep a read buffer alive per byte).
async fn read(mut body: axum::body::Body, capacity: usize) -> Result<Bytes, ApiError> {
    let mut buf = BytesMut::with_capacity(capacity.min(MAX_CLAIM_BODY));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            if super::timed_body::is_timeout(&e) {
                body_late()
            } else {
                ApiError::invalid(format!("the request body could not be read: {e}"))
            }
        })?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > MAX_CLAIM_BODY {
                return Err(body_too_large());
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
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
