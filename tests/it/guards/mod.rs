//! Guard tests: rate limits, sold-out fast path, admission gate and shedding, signed identity,
//! admin separation. Counts and status codes only — never timings.

mod admin;
mod admission;
mod identity;
mod rate;
mod soldout;
mod tokens;

use std::process::Child;
use std::sync::Arc;

use parking_lot::Mutex;
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::TOKEN;

/// One claim with extra headers; returns status, headers and body.
pub async fn claim_raw(
    base: &str,
    campaign: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Value) {
    let http = reqwest::Client::new();
    let mut req = http
        .post(format!("{base}/v1/campaigns/{campaign}/claims"))
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("claim request");
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, headers, resp.json().await.unwrap_or(Value::Null))
}

pub async fn claim_as(base: &str, campaign: &str, user: &str) -> (StatusCode, Value) {
    let (s, _, v) = claim_raw(base, campaign, json!({"user_id": user}), &[]).await;
    (s, v)
}

/// The guard metrics of a server (admin route).
pub async fn metrics(admin_base: &str) -> String {
    let resp = reqwest::Client::new()
        .get(format!("{admin_base}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics request");
    assert_eq!(resp.status(), 200, "GET /metrics");
    resp.text().await.unwrap()
}

/// One sample of `/metrics`, e.g. `seckill_campaign_engine_claims_total{campaign="x"}`.
pub async fn sample(admin_base: &str, series: &str) -> u64 {
    let text = metrics(admin_base).await;
    seckill::guard::metrics::sample(&text, series)
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

pub fn engine_claims(campaign: &str) -> String {
    format!("seckill_campaign_engine_claims_total{{campaign=\"{campaign}\"}}")
}

/// A `seckill serve` child process (own file descriptors: big storms don't starve the tests).
pub struct ServerProc {
    child: Child,
    pub url: String,
    pub log: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl ServerProc {
    pub fn start(data: &std::path::Path, extra: &[&str], rust_log: &str) -> ServerProc {
        let mut cmd = crate::child::seckill(
            &["serve", "--listen", "127.0.0.1:0", "--admin-token", TOKEN],
            &[("RUST_LOG", rust_log)],
        );
        cmd.arg("--data").arg(data).args(extra);
        let started = crate::child::start(cmd, crate::child::SERVING);
        ServerProc {
            child: started.child,
            url: started.url.expect("serve gives its address"),
            log: started.log,
            reader: Some(started.log_reader),
        }
    }

    /// SIGTERM and wait for a clean exit; returns the whole log.
    pub fn stop(mut self) -> String {
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(rc, 0);
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "serve exited with {status}");
        if let Some(r) = self.reader.take() {
            let _ = r.join(); // the log ends when the process does
        }
        self.log.lock().join("\n")
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
