//! The OpenAPI document against the router it describes, the reference page, and docs/API.md.
//!
//! The router is walked for real: its paths are read from axum's own route table (the
//! router's `Debug` output, which lists every registered path) and each method is probed
//! against the live router (anything but the 405 fallback means the method is routed), so a
//! route added without a `#[utoipa::path]` in `seckill::http::openapi::ApiDoc` fails here.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use seckill::engine::embedded::{Embedded, EmbeddedOptions};
use seckill::http::{openapi, Credentials, HttpOptions};
use serde_json::Value;
use tower::ServiceExt;

use crate::helpers::{App, TOKEN};

const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
];

/// Paths the router serves that the document describes as one page: the reference page's
/// static files (Swagger UI's scripts and styles under `/docs/`).
const PAGE_FILES: &str = "/docs/{*rest}";

/// Every path in axum's route table of `router`, read from its `Debug` output
/// (`Router { path_router: … paths: {RouteId(n): "/path", …} …, fallback_router: … }`).
fn router_paths(router: &axum::Router) -> BTreeSet<String> {
    let full = format!("{router:?}");
    let debug = full
        .split("fallback_router:")
        .next()
        .expect("Router's Debug output");
    let mut paths = BTreeSet::new();
    for piece in debug.split("): \"").skip(1) {
        let path = piece.split('"').next().unwrap_or_default();
        if path.starts_with('/') && !path.contains("__private__") {
            paths.insert(path.to_owned());
        }
    }
    paths
}

/// A concrete path for a templated one: each `{param}` becomes `zz`.
fn concrete(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').expect("closed parameter") + open;
        out.push_str("zz");
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

async fn embedded_router() -> (axum::Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let backend = Embedded::open(EmbeddedOptions::new(dir.path()))
        .await
        .expect("embedded engine opens");
    let opts = HttpOptions {
        locks: Some(backend.locks()),
        ..HttpOptions::default()
    };
    let router = seckill::http::router(
        backend.clone() as Arc<dyn seckill::engine::backend::Backend>,
        backend.board(),
        Credentials::admin(TOKEN),
        &opts,
    );
    (router, dir)
}

/// (METHOD, path) of every operation of the document.
fn documented() -> BTreeSet<(String, String)> {
    let doc = serde_json::to_value(openapi::document()).expect("document serialises");
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            if METHODS
                .iter()
                .any(|m| m.as_str().eq_ignore_ascii_case(method))
            {
                ops.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    ops
}

#[tokio::test]
async fn every_route_of_the_router_is_in_the_document_and_back() {
    let (router, _dir) = embedded_router().await;
    let paths = router_paths(&router);
    assert!(
        paths.len() >= 15 && paths.contains("/v1/campaigns/{id}/claims"),
        "could not read the route table from the router: {paths:?}"
    );
    let mut routed = BTreeSet::new();
    for path in &paths {
        if path == PAGE_FILES {
            continue;
        }
        for method in METHODS {
            // No token and no body: every route refuses before it changes anything.
            let req = Request::builder()
                .method(method.clone())
                .uri(concrete(path))
                .body(Body::empty())
                .unwrap();
            let resp = router.clone().oneshot(req).await.unwrap();
            if resp.status() != StatusCode::METHOD_NOT_ALLOWED {
                routed.insert((method.to_string(), path.clone()));
            }
        }
    }
    let documented = documented();
    let missing: Vec<_> = routed.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "routes of the router missing from the OpenAPI document (add a #[utoipa::path] and list \
         it in seckill::http::openapi::ApiDoc): {missing:?}"
    );
    let stale: Vec<_> = documented.difference(&routed).collect();
    assert!(
        stale.is_empty(),
        "the document describes operations the router does not serve: {stale:?}"
    );
    // The page's files are served under the wildcard the document leaves out.
    let req = Request::get("/docs/swagger-ui.css")
        .body(Body::empty())
        .unwrap();
    assert_eq!(router.oneshot(req).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn the_served_document_describes_outcomes_errors_headers_and_security() {
    let app = App::spawn_with(|_| {}).await;
    let http = reqwest::Client::new();
    let resp = http
        .get(app.client.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc, serde_json::to_value(openapi::document()).unwrap());

    let scheme = &doc["components"]["securitySchemes"][openapi::ADMIN_SCHEME];
    assert_eq!(scheme["type"], "http");
    assert_eq!(scheme["scheme"], "bearer");

    let schemas = &doc["components"]["schemas"];
    let outcomes: BTreeSet<&str> = schemas["Outcome"]["enum"]
        .as_array()
        .expect("Outcome is an enum")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let want: BTreeSet<&str> = seckill::domain::Outcome::ALL
        .iter()
        .map(|o| o.as_str())
        .collect();
    assert_eq!(outcomes, want);
    assert!(schemas["ErrorBody"]["properties"]["error"].is_object());
    assert!(schemas["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .contains(&"rate_limited".into()));

    let claim = &doc["paths"]["/v1/campaigns/{id}/claims"]["post"];
    let headers: BTreeSet<&str> = claim["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["in"] == "header")
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        headers,
        BTreeSet::from(["Idempotency-Key", "X-Seckill-Ticket", "X-Seckill-User"])
    );
    assert!(claim.get("security").is_none(), "claims are public");
    let limited = &claim["responses"]["429"]["headers"];
    for h in [
        "Retry-After",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "RateLimit-Policy",
    ] {
        assert!(limited[h].is_object(), "429 of claims lacks {h}");
    }
    assert!(claim["responses"]["503"]["headers"]["Retry-After"].is_object());

    // Every admin operation names the bearer scheme and documents its 401; public ones not.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let admin = op.get("security").is_some();
            let public = [
                "/v1/campaigns/{id}/claims",
                "/v1/campaigns/{id}/queue",
                "/v1/campaigns/{id}/queue/{user_id}",
                "/v1/campaigns/{id}",
                "/healthz",
                "/openapi.json",
                "/docs",
                "/docs/",
                // The dashboard's page and assets; its data is admin.
                "/dashboard",
                "/dashboard/dashboard.js",
                "/dashboard/dashboard.css",
            ];
            let get_campaign = path == "/v1/campaigns/{id}" && method == "get";
            let expect_public =
                public.contains(&path.as_str()) && (path != "/v1/campaigns/{id}" || get_campaign);
            assert_eq!(admin, !expect_public, "{method} {path}: security");
            if admin {
                assert!(op["responses"]["401"].is_object(), "{method} {path}: 401");
            }
        }
    }
}

#[tokio::test]
async fn the_reference_page_is_served_from_the_binary() {
    let app = App::spawn_with(|_| {}).await;
    let base = app.client.url("");
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = http.get(format!("{base}/docs")).send().await.unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/docs/");
    let resp = http.get(format!("{base}/docs/")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = resp.text().await.unwrap();
    assert!(html.contains("swagger-ui"), "not the Swagger UI page");
    // Every script and style the page loads is a relative file of the binary.
    let mut assets = Vec::new();
    for attr in ["src=\"", "href=\""] {
        for piece in html.split(attr).skip(1) {
            assets.push(piece.split('"').next().unwrap().to_owned());
        }
    }
    assert!(assets.len() >= 3, "page loads too few files: {assets:?}");
    for asset in &assets {
        assert!(
            !asset.contains("//"),
            "the page loads {asset} from outside the binary"
        );
        let url = format!("{base}/docs/{}", asset.trim_start_matches("./"));
        let resp = http.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{url}");
        assert!(!resp.bytes().await.unwrap().is_empty(), "{url} is empty");
    }
    let init = http
        .get(format!("{base}/docs/swagger-initializer.js"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(init.contains("/openapi.json"), "{init}");
    assert!(init.contains("\"validatorUrl\": \"none\""), "{init}");
}

/// `(METHOD, path)` pairs written as `` `METHOD /path` `` in docs/API.md.
fn api_md_operations() -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/API.md"))
        .expect("docs/API.md exists");
    let mut ops = BTreeSet::new();
    for (i, piece) in text.split('`').enumerate() {
        if i % 2 == 0 {
            continue; // outside backticks
        }
        let Some((method, path)) = piece.split_once(' ') else {
            continue;
        };
        let path = path.split('?').next().unwrap();
        if METHODS.iter().any(|m| m.as_str() == method) && path.starts_with('/') {
            ops.insert((method.to_owned(), path.to_owned()));
        }
    }
    ops
}

#[test]
fn docs_api_md_and_the_document_name_the_same_operations() {
    let md = api_md_operations();
    let doc = documented();
    let undocumented: Vec<_> = doc.difference(&md).collect();
    assert!(
        undocumented.is_empty(),
        "operations of the OpenAPI document that docs/API.md does not describe: {undocumented:?}"
    );
    let stale: Vec<_> = md.difference(&doc).collect();
    assert!(
        stale.is_empty(),
        "docs/API.md describes operations the OpenAPI document does not have: {stale:?}"
    );
}
