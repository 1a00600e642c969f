//! The claim route served before the router, on the public listener.
//!
//! In a sale nearly every request is `POST /v1/campaigns/{id}/claims`, and nearly every one
//! is refused from memory. Through axum's `Router` each of them paid for route matching, the
//! boxed route service's clone and its boxed future, the trace and catch-panic layers and the
//! body-limit layer: about 11,000 instructions, a third of a refusal (docs/PROFILE.md).
//! [`Dispatch`] is the hyper service of a public connection: it recognises exactly the claim
//! route and hands it to the one claim implementation ([`super::claim::answer`]) directly;
//! every other request, and every request while the trace layer's per-request logging is on,
//! goes to the router unchanged.
//!
//! What the router's layers did for a claim, the fast path does itself, identically:
//! - the body limit: the same `DefaultBodyLimit` marker on the request, so the extractors
//!   answer 413 exactly as they do behind the router;
//! - the peer address (`ConnectInfo`) and the body timeout: set for both paths by [`Dispatch`];
//! - a panic becomes the router's 500 `internal` answer ([`super::panic_answer`]) and, as
//!   behind the router (the catch-panic layer sits outside the trace layer), is not logged as
//!   a failed response;
//! - a 5xx is logged by tower-http's own `DefaultOnFailure`, so the event (target, level,
//!   fields) is the trace layer's.
//!
//! What the fast path takes: method `POST`, path `/v1/campaigns/{id}/claims` whose id is a
//! plain segment (visible ASCII, no `%`: nothing the router would decode), no query string,
//! and exactly `content-type: application/json`. Anything else, however close, is the
//! router's. `--no-fast-claims` (hidden) sends every request to the router; the tests use it
//! to compare the two paths byte for byte.

use std::convert::Infallible;
use std::future::{Future, Ready};
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request};
use axum::http::{header, Method};
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use tower::{Layer, Service, ServiceExt};
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::OnFailure;

use super::timed_body::TimedBody;
use super::watchdog::ends_with;
use super::watchdog::{Clock, InFlight};
use super::AppState;

/// What the fast path needs: the application state and the body limit of the claim route.
#[derive(Clone)]
pub struct FastClaims {
    app: Arc<AppState>,
    limit: <DefaultBodyLimit as Layer<Echo>>::Service,
}

impl FastClaims {
    pub(super) fn new(app: AppState, max_body: usize) -> Self {
        Self {
            app: Arc::new(app),
            limit: DefaultBodyLimit::max(max_body).layer(Echo),
        }
    }

    /// The claim's answer, boxed once: everything the claim does is in this one future (the
    /// router path pays for the same box, and for more).
    fn claim(&self, req: Request, id: String) -> Claim {
        let Ok(req) = self.limit.clone().call(req).into_inner();
        Box::pin(super::claim::answer(self.app.clone(), req, Some(id)))
    }
}

type Claim = Pin<Box<dyn Future<Output = Response> + Send>>;

/// What the router's layers around a route make of its answer (`Err`: the handler panicked):
/// a panic becomes the catch-panic layer's 500 (not logged as a failed response: that layer is
/// outside the trace layer), a 5xx is logged as the trace layer logs it, and the route
/// (outside both, as `Router::layer` applies layers to each route) sets `content-length`.
fn as_routed(answer: std::thread::Result<Response>, start: Instant) -> Response {
    let resp = match answer {
        Ok(resp) => resp,
        Err(_) => return with_length(super::panic_answer()),
    };
    if resp.status().is_server_error() {
        let class = ServerErrorsFailureClass::StatusCode(resp.status());
        super::refusals::Refusals.on_failure(class, start.elapsed(), &tracing::Span::none());
    }
    with_length(resp)
}

/// The answer with the `content-length` header axum's routes set (hyper would write it too,
/// but elsewhere among the headers).
fn with_length(mut resp: Response) -> Response {
    use hyper::body::Body as _;
    if !resp.headers().contains_key(header::CONTENT_LENGTH) {
        if let Some(n) = resp.body().size_hint().exact() {
            resp.headers_mut()
                .insert(header::CONTENT_LENGTH, header::HeaderValue::from(n));
        }
    }
    resp
}

/// A service that answers the request it is given: with `DefaultBodyLimit`'s layer around it,
/// it puts the limit's marker on a request without going through a router.
#[derive(Clone, Copy)]
pub struct Echo;

impl Service<Request> for Echo {
    type Response = Request;
    type Error = Infallible;
    type Future = Ready<Result<Request, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        std::future::ready(Ok(req))
    }
}

/// The campaign id of a request the fast path takes, `None` for the router's requests.
pub(super) fn claim_id<B>(req: &hyper::Request<B>) -> Option<&str> {
    if req.method() != Method::POST || req.uri().query().is_some() {
        return None;
    }
    let id = req
        .uri()
        .path()
        .strip_prefix("/v1/campaigns/")?
        .strip_suffix("/claims")?;
    let plain = |b: u8| b.is_ascii_graphic() && !matches!(b, b'%' | b'/' | b'?' | b'#');
    if id.is_empty() || !id.bytes().all(plain) {
        return None;
    }
    let mut types = req.headers().get_all(header::CONTENT_TYPE).iter();
    let json = types
        .next()
        .is_some_and(|v| v.as_bytes() == b"application/json");
    (json && types.next().is_none()).then_some(id)
}

/// Whether the router's trace layer logs every request (its span, request or response events
/// are enabled): then every request goes through the router, so the log stays complete.
fn traced_per_request() -> bool {
    use tracing::Level;
    tracing::enabled!(target: "tower_http::trace::make_span", Level::DEBUG)
        || tracing::enabled!(target: "tower_http::trace::on_request", Level::DEBUG)
        || tracing::enabled!(target: "tower_http::trace::on_response", Level::DEBUG)
}

/// The hyper service of one connection: each request gets its peer address and body timeout,
/// counts as in progress on the connection's clock until its answer is written, and goes to
/// the fast path or the router.
#[derive(Clone)]
pub struct Dispatch {
    pub(super) router: Router,
    pub(super) fast: Option<Arc<FastClaims>>,
    pub(super) peer: SocketAddr,
    pub(super) clock: Arc<Clock>,
    pub(super) body_timeout: Duration,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Dispatch {
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, req: hyper::Request<Incoming>) -> Answer {
        let in_flight = Some(self.clock.begin());
        let id = super::request_id::of(req.headers());
        let fast = self
            .fast
            .as_ref()
            .filter(|_| !traced_per_request())
            .and_then(|f| Some((f, claim_id(&req)?.to_owned())));
        let body_timeout = self.body_timeout;
        let mut req = req.map(|b| axum::body::Body::new(TimedBody::new(b, body_timeout)));
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let kind = match fast {
            Some((fast, id)) => Kind::Fast {
                claim: fast.claim(req, id),
                start: Instant::now(),
                in_flight,
            },
            None => Kind::Routed {
                call: self.router.clone().oneshot(req),
                in_flight,
            },
        };
        Answer { kind, id }
    }
}

/// The answer of one request: the fast path's claim or the router's call, polled with the
/// request's id in `request_id::CURRENT`, then the response (carrying the id) whose body
/// ends the request on the connection's clock.
pub struct Answer {
    kind: Kind,
    id: axum::http::HeaderValue,
}

// The router's call stays inline, as it was before the fast path: no allocation added to the
// other routes for the enum's sake.
#[allow(clippy::large_enum_variant)]
enum Kind {
    Fast {
        claim: Claim,
        start: Instant,
        in_flight: Option<InFlight>,
    },
    Routed {
        call: tower::util::Oneshot<Router, Request>,
        in_flight: Option<InFlight>,
    },
}

impl Future for Answer {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        let id = me.id.clone();
        super::request_id::CURRENT.sync_scope(id, || me.poll_kind(cx))
    }
}

impl Answer {
    fn poll_kind(&mut self, cx: &mut Context<'_>) -> Poll<Result<Response, Infallible>> {
        let (mut resp, in_flight) = match &mut self.kind {
            Kind::Fast {
                claim,
                start,
                in_flight,
            } => {
                let polled = catch_unwind(AssertUnwindSafe(|| claim.as_mut().poll(cx)));
                let answer = match polled {
                    Ok(Poll::Pending) => return Poll::Pending,
                    Ok(Poll::Ready(resp)) => Ok(resp),
                    Err(panic) => Err(panic),
                };
                (as_routed(answer, *start), in_flight)
            }
            Kind::Routed { call, in_flight } => match Pin::new(call).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(resp)) => (resp, in_flight),
                Poll::Ready(Err(never)) => match never {},
            },
        };
        let in_flight = in_flight.take().expect("an answer is polled after its end");
        resp.headers_mut()
            .insert(super::request_id::HEADER, self.id.clone());
        Poll::Ready(Ok(ends_with(resp, in_flight)))
    }
}

#[cfg(test)]
mod tests;
