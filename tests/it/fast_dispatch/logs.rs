//! The fast path logs a 5xx as the router's trace layer does: the same event (level, target,
//! message, fields) from two real server processes at their usual log level, one with the
//! fast path and one with `--no-fast-claims`.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{claim, send, MAX_IN_FLIGHT};
use crate::helpers::TOKEN;
use crate::process::Proc;

fn serve(data: &std::path::Path, router_only: bool) -> Proc {
    let max = MAX_IN_FLIGHT.to_string();
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        TOKEN,
        "--data",
        data.to_str().expect("utf-8 temp path"),
        "--max-in-flight",
        &max,
        "--body-timeout-ms",
        "500",
    ];
    if router_only {
        args.push("--no-fast-claims");
    }
    Proc::spawn(&args, &[])
}

/// The log lines of failed responses, without what differs between any two of them (the
/// time, colours, the latency's value).
fn failures(p: &Proc) -> Vec<String> {
    p.log
        .lock()
        .iter()
        .filter(|l| l.contains("response failed") || l.contains("answered 503"))
        .map(|l| {
            let mut plain = String::new();
            let mut chars = l.chars();
            while let Some(c) = chars.next() {
                if c == '\x1b' {
                    chars.by_ref().find(|c| *c == 'm');
                } else {
                    plain.push(c);
                }
            }
            let from = plain
                .find("ERROR")
                .or_else(|| plain.find("WARN"))
                .unwrap_or(0);
            let plain = &plain[from..];
            match plain.find("latency=") {
                Some(at) => {
                    let rest = plain[at..].trim_start_matches(|c: char| !c.is_ascii_whitespace());
                    format!("{}latency=N{rest}", &plain[..at])
                }
                None => plain.to_owned(),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_5xx_is_logged_as_the_router_logs_it() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let servers = [serve(a.path(), false), serve(b.path(), true)];
    let mut shed = claim("shed", "open", r#"{"user_id":"mo"}"#);
    shed.busy = true;
    for (p, data) in servers.iter().zip([a.path(), b.path()]) {
        let spec = json!({"id": "open", "stock": 10, "per_user_limit": 1});
        p.client().create_campaign(&spec).await.unwrap();
        let answer = send(p.url.trim_start_matches("http://"), data, &shed).await;
        assert!(answer.starts_with(b"HTTP/1.1 503"), "{answer:?}");
    }
    let started = Instant::now();
    while servers.iter().any(|p| failures(p).is_empty()) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no failure logged"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (fast, routed) = (failures(&servers[0]), failures(&servers[1]));
    assert_eq!(fast, routed);
    // A 503 is a refusal: summarised (one line a second at most), not an ERROR per request.
    assert!(fast[0].contains("answered 503"), "{fast:?}");
    assert!(fast[0].contains("WARN"), "{fast:?}");
}
