//! The listener's fast claim path answers exactly as the router does.
//!
//! Two embedded servers with the same settings, one with the fast path (the default) and one
//! with `--no-fast-claims` (every request through the router), receive the same sequence of
//! raw HTTP/1.1 requests: claims that win, sell out, repeat, hit a rate limit or a paused
//! campaign, bad bodies and content types, oversize and late bodies, and near misses of the
//! route that must stay the router's (query string, trailing slash, percent-encoded id, other
//! methods). Every answer must be the same bytes: status line, headers (but `Date`), body.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use reqwest::Method;
use seckill::config::ServeConfig;

use crate::helpers::App;

mod logs;

/// One request of the comparison: its head lines after the request line, and its body.
struct Shape {
    what: &'static str,
    line: String,
    headers: Vec<String>,
    body: Vec<u8>,
    /// Send the head and only this much of the body, then wait for the answer (408).
    stall_after: Option<usize>,
    /// Sent while stalled claims hold every in-flight place (503 `overloaded`).
    busy: bool,
}

fn shape(what: &'static str, method: &str, path: &str, ct: Option<&str>, body: &str) -> Shape {
    Shape {
        what,
        line: format!("{method} {path} HTTP/1.1"),
        headers: ct
            .map(|c| vec![format!("content-type: {c}")])
            .unwrap_or_default(),
        body: body.as_bytes().to_vec(),
        stall_after: None,
        busy: false,
    }
}

fn claim(what: &'static str, campaign: &str, body: &str) -> Shape {
    let path = format!("/v1/campaigns/{campaign}/claims");
    shape(what, "POST", &path, Some("application/json"), body)
}

fn with(mut s: Shape, header: &str) -> Shape {
    s.headers.push(header.to_owned());
    s
}

fn shapes() -> Vec<Shape> {
    let user = |u: &str| format!(r#"{{"user_id":"{u}"}}"#);
    let mut late = claim("late body", "open", &user("late"));
    late.stall_after = Some(5);
    let mut shed = claim("shed: every place taken", "open", &user("mo"));
    shed.busy = true;
    vec![
        claim("won", "open", &user("alice")),
        claim("already claimed", "open", &user("alice")),
        claim("over limit", "open", r#"{"user_id":"bob","qty":2}"#),
        claim("won the last unit", "gone", &user("first")),
        claim("sold out", "gone", &user("second")),
        claim("sold out, qty 3", "gone", r#"{"user_id":"third","qty":3}"#),
        claim("unknown campaign", "nope", &user("alice")),
        claim("paused", "paused", &user("alice")),
        claim("bad JSON", "open", r#"{"user_id":"#),
        claim("missing user", "open", r#"{"qty":1}"#),
        claim("qty zero", "open", r#"{"user_id":"z","qty":0}"#),
        claim("unknown field", "open", r#"{"user_id":"z","x":1}"#),
        claim("escaped user", "open", r#"{"user_id":"\u0063arol"}"#),
        claim("empty body", "open", ""),
        claim("oversize body", "open", &" ".repeat(20_000)),
        late,
        shape(
            "no content type",
            "POST",
            "/v1/campaigns/open/claims",
            None,
            &user("dan"),
        ),
        shape(
            "text content type",
            "POST",
            "/v1/campaigns/open/claims",
            Some("text/plain"),
            &user("dan"),
        ),
        shape(
            "json with charset",
            "POST",
            "/v1/campaigns/open/claims",
            Some("application/json; charset=utf-8"),
            &user("erin"),
        ),
        shape(
            "query string",
            "POST",
            "/v1/campaigns/open/claims?x=1",
            Some("application/json"),
            &user("fay"),
        ),
        shape(
            "trailing slash",
            "POST",
            "/v1/campaigns/open/claims/",
            Some("application/json"),
            &user("gus"),
        ),
        shape(
            "percent-encoded id",
            "POST",
            "/v1/campaigns/op%65n/claims",
            Some("application/json"),
            &user("hal"),
        ),
        shape(
            "GET on the route",
            "GET",
            "/v1/campaigns/open/claims",
            None,
            "",
        ),
        shape(
            "HEAD on the route",
            "HEAD",
            "/v1/campaigns/open/claims",
            None,
            "",
        ),
        with(
            claim("idempotent first", "open", &user("ivy")),
            "idempotency-key: k-1",
        ),
        with(
            claim("idempotent repeat", "open", &user("ivy")),
            "idempotency-key: k-1",
        ),
        with(
            claim("idempotency key, other user", "open", &user("ike")),
            "idempotency-key: k-1",
        ),
        with(
            claim("bad idempotency key", "open", &user("jo")),
            "idempotency-key: ",
        ),
        claim("qty as a string", "open", r#"{"user_id":"q","qty":"1"}"#),
        claim(
            "sold out, fresh user",
            "gone",
            r#"{ "user_id" : "spaced" }"#,
        ),
        claim("rate limit: first", "limited", &user("kim")),
        claim("rate limit: refused", "limited", &user("kim")),
        with(
            claim("proxy header (untrusted)", "open", &user("lee")),
            "x-forwarded-for: 10.0.0.1",
        ),
        shape("campaign view", "GET", "/v1/campaigns/open", None, ""),
        shed,
    ]
}

/// Most claims in flight on both servers: two stalled claims fill them.
const MAX_IN_FLIGHT: usize = 2;

/// Sends `s` on a fresh connection (`connection: close`) and reads the whole answer; for a
/// `busy` shape, while stalled claims hold every in-flight place.
async fn send(addr: &str, data: &std::path::Path, s: &Shape) -> Vec<u8> {
    if !s.busy {
        return send_one(addr, s).await;
    }
    // Claims whose bodies have arrived wait inside the engine for a commit the held write
    // lock delays, each holding its place (a claim still sending its body holds none).
    let mut blocker = crate::helpers::hold_ledger(data).await;
    let stall: Vec<Shape> = (0..MAX_IN_FLIGHT)
        .map(|i| {
            claim(
                "stalled",
                "open",
                &format!(r#"{{"user_id":"staller-{i}"}}"#),
            )
        })
        .collect();
    let stalled: Vec<_> = stall.iter().map(|st| send_one(addr, st)).collect();
    let shed = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let answer = send_one(addr, s).await;
        sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
        answer
    };
    let (_, answer) = tokio::join!(futures::future::join_all(stalled), shed);
    answer
}

async fn send_one(addr: &str, s: &Shape) -> Vec<u8> {
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    // A fixed request id: both paths answer with it (a generated one would differ).
    let mut head = format!(
        "{}\r\nhost: seckill\r\nconnection: close\r\nx-request-id: compare-1\r\n",
        s.line
    );
    for h in &s.headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", s.body.len()));
    let mut out = head.into_bytes();
    out.extend_from_slice(&s.body[..s.stall_after.unwrap_or(s.body.len())]);
    conn.write_all(&out).await.expect("send");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer));
    if let Err(e) = read.await.expect("an answer within 20 s") {
        // A refused oversize body may reset the connection after the answer.
        answer.extend_from_slice(format!("\n<read error: {}>", e.kind()).as_bytes());
    }
    answer
}

/// The answer without its `Date` header, which only says when it was sent.
fn comparable(answer: &[u8]) -> String {
    String::from_utf8_lossy(answer)
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .collect::<Vec<_>>()
        .join("\r\n")
}

async fn deployment(router_only: bool) -> App {
    let app = App::spawn_with(|c: &mut ServeConfig| {
        c.no_fast_claims = router_only;
        c.conn.body_timeout_ms = 500;
        c.guard.max_in_flight = MAX_IN_FLIGHT;
    })
    .await;
    for (id, stock) in [("open", 1000), ("gone", 1), ("paused", 10), ("limited", 10)] {
        app.create(json!({"id": id, "stock": stock, "per_user_limit": 1}))
            .await;
    }
    let (s, _) = app
        .admin(Method::POST, "/v1/campaigns/paused/pause", None)
        .await;
    assert_eq!(s, 200);
    let limits = json!({"per_user": "1/h"});
    let (s, _) = app
        .admin(Method::PUT, "/v1/campaigns/limited/limits", Some(limits))
        .await;
    assert_eq!(s, 200);
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fast_path_answers_byte_for_byte_as_the_router() {
    let fast = deployment(false).await;
    let router = deployment(true).await;
    let addr = |a: &App| {
        let url = a.client.url("");
        url.trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned()
    };
    let (fast_addr, router_addr) = (addr(&fast), addr(&router));
    let mut differ = Vec::new();
    for s in shapes() {
        let (a, b) = tokio::join!(
            send(&fast_addr, fast.data_dir(), &s),
            send(&router_addr, router.data_dir(), &s)
        );
        let (a, b) = (comparable(&a), comparable(&b));
        assert!(b.starts_with("HTTP/1.1 "), "{}: no answer: {b}", s.what);
        // The shapes that need a set-up really reached the state they are about.
        let want = match s.what {
            "late body" => Some("408"),
            "oversize body" => Some("413"),
            "rate limit: refused" => Some("429"),
            "shed: every place taken" => Some("503"),
            _ => None,
        };
        if let Some(want) = want {
            assert!(
                b.starts_with(&format!("HTTP/1.1 {want}")),
                "{}: {b}",
                s.what
            );
        }
        if a != b {
            differ.push(format!("{}:\n fast:   {a:?}\n router: {b:?}", s.what));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
    fast.stop().await;
    router.stop().await;
}
