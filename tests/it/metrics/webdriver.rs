//! A small client of the W3C WebDriver protocol (JSON over HTTP) for Debian's chromedriver
//! driving headless chromium: a session, navigation, script evaluation and screenshots.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

const INSTALL_HINT: &str = "the browser test needs Debian's chromium and chromedriver: \
    apt-get install -y chromium chromium-driver (scripts/test.sh installs them)";

/// A chromedriver process on a free port (killed on drop).
pub struct Driver {
    child: Child,
    url: String,
}

fn which(names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| {
        let out = Command::new("sh")
            .args(["-c", &format!("command -v {n}")])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    })
}

impl Driver {
    pub async fn start() -> Driver {
        let driver = which(&["chromedriver"]).unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        which(&["chromium", "chromium-browser"]).unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let d = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        for _ in 0..300 {
            let ready = reqwest::get(format!("{}/status", d.url)).await;
            if let Ok(r) = ready {
                if let Ok(v) = r.json::<Value>().await {
                    if v["value"]["ready"] == true {
                        return d;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not become ready");
    }

    /// A headless chromium session with a laptop-sized window.
    pub async fn session(&self) -> Session {
        let binary = which(&["chromium", "chromium-browser"]).expect("chromium");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": binary,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1366,900"]
            }
        }}});
        let http = reqwest::Client::new();
        let v = call(
            &http,
            reqwest::Method::POST,
            &format!("{}/session", self.url),
            Some(caps),
        )
        .await;
        let id = v["sessionId"].as_str().expect("a session id").to_owned();
        Session {
            http,
            base: format!("{}/session/{id}", self.url),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method, url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("webdriver request");
    let status = resp.status();
    let v: Value = resp.json().await.expect("webdriver JSON");
    assert!(status.is_success(), "webdriver {url}: {status} {v}");
    v["value"].clone()
}

/// One browser session.
pub struct Session {
    http: reqwest::Client,
    base: String,
}

impl Session {
    pub async fn goto(&self, url: &str) {
        call(
            &self.http,
            reqwest::Method::POST,
            &format!("{}/url", self.base),
            Some(json!({"url": url})),
        )
        .await;
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        let body = json!({"script": script, "args": []});
        call(
            &self.http,
            reqwest::Method::POST,
            &format!("{}/execute/sync", self.base),
            Some(body),
        )
        .await
    }

    pub async fn screenshot(&self) -> Vec<u8> {
        let v = call(
            &self.http,
            reqwest::Method::GET,
            &format!("{}/screenshot", self.base),
            None,
        )
        .await;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .expect("valid base64")
    }

    pub async fn close(self) {
        call(&self.http, reqwest::Method::DELETE, &self.base, None).await;
    }
}
