//! Whole HTTP requests with fuzzed bodies, headers, paths and query strings, answered by the
//! real router over an embedded engine (a temp directory, fsync off) in this process.
//!
//! Property: every answer is a 2xx, or a 4xx whose body is `{"error": {"code", "message"}}`
//! and after which the sale (campaign `c`: status, stock, remaining) is exactly as before.
//! Never a 5xx, never a panic.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::split;
use crate::engine::backend::Backend;
use crate::engine::{Embedded, EmbeddedOptions};
use crate::http::{router, Credentials, HttpOptions};

const TOKEN: &str = "fuzz-admin-token";

struct World {
    rt: tokio::runtime::Runtime,
    router: Router,
    backend: Arc<Embedded>,
    _dir: tempfile::TempDir,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let dir = tempfile::tempdir().expect("a temp directory");
        let mut opts = EmbeddedOptions::new(dir.path());
        opts.synchronous_full = false;
        let backend = rt
            .block_on(Embedded::open(opts))
            .expect("the embedded engine opens");
        // The guards start their sweeper task on construction.
        let entered = rt.enter();
        let opts = HttpOptions {
            locks: Some(backend.locks()),
            ..HttpOptions::default()
        };
        let router = router(
            backend.clone(),
            backend.board(),
            Credentials::admin(TOKEN),
            &opts,
        );
        drop(entered);
        let world = World {
            rt,
            router,
            backend,
            _dir: dir,
        };
        for body in [
            r#"{"id":"c","stock":1000000000,"per_user_limit":1000000}"#,
            r#"{"id":"p","codes":["A","B","C"]}"#,
        ] {
            let (status, answer) = world.send(Method::POST, "/v1/campaigns", body.into(), None);
            assert_eq!(status, 201, "campaign setup failed: {answer}");
        }
        world
    })
}

impl World {
    fn send(&self, method: Method, uri: &str, body: Vec<u8>, key: Option<&[u8]>) -> (u16, Value) {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {TOKEN}"));
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        let mut req = match req.body(Body::from(body)) {
            Ok(r) => r,
            Err(_) => return (0, Value::Null),
        };
        let peer: SocketAddr = "127.0.0.1:40000".parse().expect("static address");
        req.extensions_mut().insert(ConnectInfo(peer));
        self.rt.block_on(async {
            let resp = self.router.clone().oneshot(req).await.expect("infallible");
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.expect("body").to_bytes();
            let json = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                Value::String(format!("NOT JSON: {text}"))
            });
            (status, json)
        })
    }

    fn sale(&self) -> Value {
        let view = self.rt.block_on(self.backend.campaign("c"));
        serde_json::to_value(view.expect("campaign c exists")).expect("a view serializes")
    }
}

/// Byte 0 picks the route; up to the first NUL is the path parameter, query string or
/// Idempotency-Key; the rest is the body.
pub fn http_request(data: &[u8]) {
    let w = world();
    let (sel, arg, body) = split(data);
    let arg_text = String::from_utf8_lossy(arg);
    let (method, uri, key) = match sel % 9 {
        0 => (Method::POST, "/v1/campaigns/c/claims".to_owned(), None),
        1 => (Method::POST, "/v1/campaigns/c/claims".to_owned(), Some(arg)),
        2 => (Method::POST, "/v1/campaigns".to_owned(), None),
        3 => (Method::POST, "/v1/campaigns/c/restock".to_owned(), None),
        4 => (
            Method::POST,
            "/v1/campaigns/p/restock".to_owned(),
            Some(arg),
        ),
        5 => (Method::PUT, "/v1/campaigns/c/limits".to_owned(), None),
        6 => (
            Method::GET,
            format!("/v1/campaigns/c/orders?{arg_text}"),
            None,
        ),
        7 => (Method::GET, format!("/v1/orders/{arg_text}"), None),
        _ => (Method::POST, format!("/v1/orders/{arg_text}/cancel"), None),
    };
    let before = w.sale();
    let (status, answer) = w.send(method.clone(), &uri, body.to_vec(), key);
    if status == 0 {
        return; // not a request an HTTP client could send (bad URI or header bytes)
    }
    assert!(
        (200..300).contains(&status) || (400..500).contains(&status),
        "{method} {uri} answered {status}: {answer}"
    );
    if status >= 400 {
        let e = &answer["error"];
        assert!(
            e["code"].is_string() && e["message"].is_string(),
            "{method} {uri} {status} without a JSON error: {answer}"
        );
        assert_eq!(w.sale(), before, "{method} {uri} {status} changed the sale");
    } else {
        assert!(!answer.is_string(), "{method} {uri} {status}: {answer}");
    }
}
