//! Every kind of bad input gets the contract's 4xx with a JSON error, and changes nothing.
//!
//! The cases are a table (`cases.rs`); this file sends each one and compares the state before
//! and after.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{App, Deploy, TOKEN};

mod cases;

use cases::cases;

enum Auth {
    Admin,
    None,
    Raw(&'static str),
}

enum Payload {
    Json(Value),
    Raw(&'static str, Option<&'static str>),
    Big(usize),
    Empty,
}

struct Case {
    what: &'static str,
    method: Method,
    path: &'static str,
    auth: Auth,
    idem: Option<String>,
    body: Payload,
    status: u16,
    code: &'static str,
}

fn case(
    what: &'static str,
    method: Method,
    path: &'static str,
    body: Payload,
    status: u16,
    code: &'static str,
) -> Case {
    let auth = if path.starts_with("/v1/orders")
        || path.contains("/orders")
        || (method == Method::POST && !path.ends_with("/claims"))
    {
        Auth::Admin
    } else {
        Auth::None
    };
    Case {
        what,
        method,
        path,
        auth,
        idem: None,
        body,
        status,
        code,
    }
}

fn create(what: &'static str, body: Value) -> Case {
    case(
        what,
        Method::POST,
        "/v1/campaigns",
        Payload::Json(body),
        400,
        "invalid_request",
    )
}

fn claim(what: &'static str, body: Value) -> Case {
    case(
        what,
        Method::POST,
        "/v1/campaigns/shop/claims",
        Payload::Json(body),
        400,
        "invalid_request",
    )
}

/// Everything a bad request could have changed.
async fn state(app: &App) -> Value {
    let mut out = Vec::new();
    for id in ["shop", "pool"] {
        out.push(serde_json::to_value(app.client.campaign(id).await.unwrap()).unwrap());
        out.push(serde_json::to_value(app.client.all_orders(id).await.unwrap()).unwrap());
    }
    for id in ["n", "sneaky", "nope"] {
        let (s, _) = app
            .admin(Method::GET, &format!("/v1/campaigns/{id}"), None)
            .await;
        out.push(json!(s));
    }
    Value::Array(out)
}

async fn bad_input_is_refused_and_changes_nothing(deploy: Deploy) {
    let app = App::spawn(deploy).await;
    app.create(json!({"id": "shop", "stock": 10, "per_user_limit": 2}))
        .await;
    app.create(json!({"id": "pool", "codes": ["C1", "C2"]}))
        .await;
    assert_eq!(
        app.claim("shop", "u1", 1).await.outcome,
        seckill::domain::Outcome::Won
    );
    app.settle().await;
    let before = state(&app).await;
    // Bad requests get their own connections: the server closes one after refusing an
    // oversized body, and a pooled client could race to reuse it for the next state read.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for c in cases() {
        let mut req = http.request(c.method.clone(), app.client.url(c.path));
        match c.auth {
            Auth::Admin => req = req.bearer_auth(TOKEN),
            Auth::Raw(h) => req = req.header("authorization", h),
            Auth::None => {}
        }
        if let Some(k) = &c.idem {
            req = req.header("idempotency-key", k);
        }
        req = match c.body {
            Payload::Json(v) => req.json(&v),
            Payload::Raw(s, ct) => {
                let r = req.body(s);
                match ct {
                    Some(ct) => r.header("content-type", ct),
                    None => r,
                }
            }
            Payload::Big(n) => req
                .header("content-type", "application/json")
                .body(format!("{{\"user_id\":\"{}\"}}", "x".repeat(n))),
            Payload::Empty => req,
        };
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(status, c.status, "{}: got {status} {body}", c.what);
        assert_eq!(body["error"]["code"], c.code, "{}: {body}", c.what);
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.len() > 5,
            "{}: message should say what is wrong: {body}",
            c.what
        );
        assert_eq!(state(&app).await, before, "{} changed state", c.what);
    }
    app.stop().await;
}

crate::conformance!(bad_input_is_refused_and_changes_nothing);
