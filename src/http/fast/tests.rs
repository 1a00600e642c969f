//! The fast path's own pieces: route recognition, the panic answer, the tracing switch.

use super::*;
use axum::routing::get;
use http_body_util::BodyExt;

async fn bytes(resp: Response) -> (String, Vec<u8>) {
    let head = format!("{:?} {:?}", resp.status(), resp.headers());
    (
        head,
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
}

#[tokio::test]
async fn a_panic_is_answered_as_the_router_answers_it() {
    fn boom() -> Response {
        panic!("a bug in a handler")
    }
    let router = Router::new()
        .route("/", get(|| async { boom() }))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            super::super::panic_answer()
        }));
    let routed = router
        .oneshot(hyper::Request::new(axum::body::Body::empty()))
        .await
        .unwrap();
    let fast = as_routed(catch_unwind(boom), Instant::now());
    assert_eq!(fast.status(), 500);
    assert_eq!(bytes(fast).await, bytes(routed).await);
}

#[test]
fn per_request_tracing_sends_everything_to_the_router() {
    let traced = |filter: &str| {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, traced_per_request)
    };
    assert!(!traced("info,sqlx=warn,tower_http=warn"));
    assert!(!traced("info"));
    assert!(traced("tower_http=debug"));
    assert!(traced("debug"));
}

fn req(method: Method, uri: &str, ct: &[&str]) -> hyper::Request<()> {
    let mut b = hyper::Request::builder().method(method).uri(uri);
    for v in ct {
        b = b.header(header::CONTENT_TYPE, *v);
    }
    b.body(()).unwrap()
}

#[test]
fn only_the_plain_claim_route_is_taken() {
    let json = ["application/json"];
    let id = |m, u, ct: &[&str]| claim_id(&req(m, u, ct)).map(str::to_owned);
    assert_eq!(
        id(Method::POST, "/v1/campaigns/a-1/claims", &json).as_deref(),
        Some("a-1")
    );
    for uri in [
        "/v1/campaigns/a/claims/",
        "/v1/campaigns/a/claims?x=1",
        "/v1/campaigns/a/claims?",
        "/v1/campaigns/a%20b/claims",
        "/v1/campaigns//claims",
        "/v1/campaigns/a/b/claims",
        "/v1/campaigns/a/claim",
    ] {
        assert_eq!(id(Method::POST, uri, &json), None, "{uri}");
    }
    let uri = "/v1/campaigns/a/claims";
    assert_eq!(id(Method::GET, uri, &json), None);
    assert_eq!(id(Method::HEAD, uri, &json), None);
    assert_eq!(id(Method::POST, uri, &[]), None);
    assert_eq!(
        id(Method::POST, uri, &["application/json; charset=utf-8"]),
        None
    );
    assert_eq!(
        id(Method::POST, uri, &["application/json", "text/plain"]),
        None
    );
}
