//! Scoped tokens, the config file and request ids on a real `seckill serve` process: each
//! token does what its scopes allow and is answered 403 naming the scope it lacks beyond
//! them; a token is rotated by editing the config file (SIGHUP, or the file's change alone)
//! without a restart; every admin change is logged with its token's name and request id; the
//! answer and the error body carry the request's id.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::process::Proc;
use seckill::bench::client::Client;

const OPS: &str = "ops-secret-0123456789";
const PAY: &str = "pay-secret-0123456789";
const VIEW: &str = "view-secret-0123456789";
const NEXT: &str = "next-secret-0123456789";

fn sha256(secret: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

fn config(dir: &std::path::Path, tokens: &[String]) -> std::path::PathBuf {
    let path = dir.join("seckill.toml");
    let list: Vec<String> = tokens.iter().map(|t| format!("{t:?}")).collect();
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndata = {:?}\nmax_batch = 512\ntoken = [{}]\n",
        dir.join("data").to_str().unwrap(),
        list.join(", ")
    );
    // Written whole then renamed, as an editor or a config tool does.
    let tmp = dir.join("seckill.toml.new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

async fn status(c: &Client, method: Method, path: &str, body: Option<&Value>) -> (u16, Value) {
    let (s, v) = c.admin(method, path, body).await.expect("an answer");
    (s.as_u16(), v)
}

/// Waits until `secret` is answered `want` on a read route.
async fn until(url: &str, secret: &str, want: StatusCode) {
    let c = Client::new(url, secret);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s, v) = c.admin(Method::GET, "/v1/events", None).await.unwrap();
        if s == want {
            return;
        }
        assert!(Instant::now() < deadline, "still {s} for the token: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn tokens_do_what_their_scopes_allow_and_rotate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        &[
            format!("ops:admin:sha256:{}", sha256(OPS)),
            format!("pay:confirm:{PAY}"),
        ],
    );
    let view = format!("view:read:{VIEW}");
    let p = Proc::spawn(&["--config", path.to_str().unwrap(), "--token", &view], &[]);
    let (ops, pay, viewer) = (
        Client::new(&p.url, OPS),
        Client::new(&p.url, PAY),
        Client::new(&p.url, VIEW),
    );
    let spec = json!({"id": "scoped", "stock": 3, "hold_seconds": 600});
    let (s, v) = status(&pay, Method::POST, "/v1/campaigns", Some(&spec)).await;
    assert_eq!(s, 403, "{v}");
    assert_eq!(v["error"]["code"], "forbidden");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("\"pay\"") && m.contains("\"admin\""), "{m}");
    assert!(v["error"]["request_id"].as_str().is_some(), "{v}");
    assert_eq!(
        status(&ops, Method::POST, "/v1/campaigns", Some(&spec))
            .await
            .0,
        201
    );
    let order = match ops.claim("scoped", "u1", 1, None).await.unwrap() {
        seckill::bench::client::ClaimReply::Processed(a) => a.order_id.expect("won"),
        other => panic!("{other:?}"),
    };
    let confirm = format!("/v1/orders/{order}/confirm");
    // The payment callback confirms, and does nothing else.
    let (s, v) = status(&viewer, Method::POST, &confirm, None).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("\"confirm\""));
    assert_eq!(status(&pay, Method::POST, &confirm, None).await.0, 200);
    let (s, v) = status(&pay, Method::GET, &format!("/v1/orders/{order}"), None).await;
    assert_eq!(s, 403, "{v}");
    let (s, _) = status(
        &pay,
        Method::POST,
        "/v1/locks/payout",
        Some(&json!({"ttl_ms": 1000})),
    )
    .await;
    assert_eq!(s, 403);
    // The viewer reads everything and changes nothing.
    for read in [
        "/v1/events",
        "/metrics",
        "/v1/webhooks",
        "/v1/campaigns/scoped/orders",
    ] {
        let (s, v) = status(&viewer, Method::GET, read, None).await;
        assert_eq!(s, 200, "{read}: {v}");
    }
    let (s, v) = status(&viewer, Method::POST, "/v1/campaigns/scoped/pause", None).await;
    assert_eq!(s, 403, "{v}");
    let (s, v) = status(
        &Client::new(&p.url, "not-a-token-at-all"),
        Method::GET,
        "/v1/events",
        None,
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (401, Some("unauthorized")),
        "{v}"
    );
    let campaign = ops.campaign("scoped").await.unwrap();
    assert_eq!(
        serde_json::to_value(campaign.status).unwrap(),
        "active",
        "a refused pause changed nothing"
    );

    // Rotation: the new ops token is added, both work; then the old one is removed.
    config(
        dir.path(),
        &[
            format!("ops:admin:sha256:{}", sha256(OPS)),
            format!("ops2:admin:{NEXT}"),
            format!("pay:confirm:{PAY}"),
        ],
    );
    p.signal(libc::SIGHUP);
    until(&p.url, NEXT, StatusCode::OK).await;
    until(&p.url, OPS, StatusCode::OK).await;
    // The file's change alone is enough too.
    config(
        dir.path(),
        &[format!("ops2:admin:{NEXT}"), format!("pay:confirm:{PAY}")],
    );
    until(&p.url, OPS, StatusCode::UNAUTHORIZED).await;
    until(&p.url, VIEW, StatusCode::OK).await; // a --token stays
                                               // A broken file keeps the valid set as it was.
    std::fs::write(&path, "token = [\"bad\"]\n").unwrap();
    p.signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_millis(500)).await;
    until(&p.url, NEXT, StatusCode::OK).await;

    // Each admin change is logged with its token's name and the request's id, which the
    // answer carries too.
    let next = Client::new(&p.url, NEXT);
    let resp = next
        .http()
        .post(next.url("/v1/campaigns/scoped/pause"))
        .bearer_auth(NEXT)
        .header("x-request-id", "ticket-4711")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "ticket-4711");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logged = p.log.lock().iter().any(|l| {
            l.contains("admin change") && l.contains("ops2") && l.contains("request_id=ticket-4711")
        });
        if logged {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no admin change line: {:?}",
            p.log.lock()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        p.log
            .lock()
            .iter()
            .any(|l| l.contains("tokens not reloaded")),
        "a broken file is reported"
    );
    let all = p.log.lock().join("\n");
    for secret in [OPS, PAY, VIEW, NEXT] {
        assert!(!all.contains(secret), "a secret reached the log");
    }
}

#[tokio::test]
async fn every_answer_carries_a_request_id_given_or_generated() {
    let app = crate::helpers::App::spawn(crate::helpers::Deploy::Embedded).await;
    let c = &app.client;
    c.create_campaign(&json!({"id": "ids", "stock": 1}))
        .await
        .unwrap();
    let send = |path: &str, id: Option<&str>, body: &'static str| {
        let mut req = c
            .http()
            .post(c.url(path))
            .header("content-type", "application/json")
            .body(body);
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        req.send()
    };
    // The claim (the fast path), given an id and not.
    let r = send(
        "/v1/campaigns/ids/claims",
        Some("claim-1"),
        r#"{"user_id":"a"}"#,
    )
    .await
    .unwrap();
    assert_eq!(r.headers()["x-request-id"], "claim-1");
    let r = send("/v1/campaigns/ids/claims", None, r#"{"user_id":"b"}"#)
        .await
        .unwrap();
    let generated = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(generated.len(), 25, "{generated}");
    // An error body names it; an unusable id is replaced.
    let long = "x".repeat(200);
    for (given, kept) in [
        (Some("bad-1"), true),
        (Some(long.as_str()), false),
        (None, false),
    ] {
        let r = send("/v1/campaigns/ids/claims", given, r#"{"user_id": 7}"#)
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["request_id"], id.as_str(), "{v}");
        assert_eq!(Some(id.as_str()) == given, kept, "{id}");
    }
    // A route of the router, and a 404.
    let r = c
        .http()
        .get(c.url("/healthz"))
        .header("x-request-id", "hz")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "hz");
    let r = c.http().get(c.url("/nowhere")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers().contains_key("x-request-id"));
    app.stop().await;
}
