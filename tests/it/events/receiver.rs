//! A webhook receiver in another process (`tests/support/webhook_receiver.py`), which checks
//! every signature with the `standardwebhooks` package from PyPI, the Standard Webhooks
//! reference implementation: what it accepts, seckill signed as the specification says.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The Python that has `standardwebhooks`: `SECKILL_TEST_PYTHON`, else the venv
/// `scripts/test.sh` makes, else `python3`.
fn python() -> String {
    if let Ok(p) = std::env::var("SECKILL_TEST_PYTHON") {
        return p;
    }
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/target/test-venv/bin/python");
    if std::path::Path::new(venv).exists() {
        return venv.to_owned();
    }
    "python3".to_owned()
}

/// One received request.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    /// When it arrived (the receiver's clock, ms since the epoch).
    #[allow(dead_code)]
    pub received_ms: f64,
    pub body: String,
}

pub struct Receiver {
    pub port: u16,
    secret: String,
    out: PathBuf,
    _dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Receiver {
    /// A receiver on a free port answering verified requests with `status`.
    pub fn start(secret: &str, status: u16) -> Receiver {
        let ok = Command::new(python())
            .args(["-c", "import standardwebhooks"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "the webhook tests need Python's standardwebhooks package: run scripts/test.sh \
             (it makes target/test-venv) or python3 -m pip install standardwebhooks"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let mut r = Receiver {
            port: seckill::testing::free_port().expect("a free port"),
            secret: secret.to_owned(),
            out: dir.path().join("received.jsonl"),
            _dir: dir,
            child: None,
        };
        r.run(status);
        r
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks", self.port)
    }

    /// (Re)starts the process on the same port, answering `status`.
    pub fn run(&mut self, status: u16) {
        self.run_with(status, &[]);
    }

    /// [`Receiver::run`] with more of the script's flags (`--refuse-user U`).
    pub fn run_with(&mut self, status: u16, extra: &[&str]) {
        self.stop();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/webhook_receiver.py"
        );
        let mut child = Command::new(python())
            .arg(script)
            .args(["--port", &self.port.to_string(), "--secret", &self.secret])
            .args(["--status", &status.to_string()])
            .args(extra)
            .arg("--out")
            .arg(&self.out)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python starts");
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the receiver's first line");
        assert!(
            line.starts_with("listening"),
            "receiver did not start: {line:?}"
        );
        self.child = Some(child);
    }

    /// Kills the process: requests are refused until [`Receiver::run`].
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Everything received so far, in arrival order; fails on any request that did not verify.
    /// Only whole lines count: a read racing the receiver's append may end mid-line.
    pub fn received(&self) -> Vec<Received> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("a receiver line");
                assert!(v.get("bad").is_none(), "a request failed verification: {v}");
                Received {
                    id: v["id"].as_str().unwrap().to_owned(),
                    received_ms: v["received_ms"].as_f64().unwrap(),
                    body: v["body"].as_str().unwrap().to_owned(),
                }
            })
            .collect()
    }

    /// Waits up to `limit` until every id of `want` was received at least once.
    pub async fn wait_for_all(&self, want: &[String], limit: Duration) -> Vec<Received> {
        let deadline = Instant::now() + limit;
        loop {
            let got = self.received();
            let ids: std::collections::HashSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
            let missing: Vec<&String> = want.iter().filter(|w| !ids.contains(w.as_str())).collect();
            if missing.is_empty() {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{} events never reached the receiver, e.g. {:?}",
                missing.len(),
                &missing[..missing.len().min(5)]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Checks what a receiver got against the feed's events: each at least once, the same id
/// always with the same body as the feed shows it, and each order's events first received in
/// the feed's order.
pub fn check_against_feed(got: &[Received], feed: &[Value]) {
    use std::collections::HashMap;
    let mut body_of: HashMap<&str, &str> = HashMap::new();
    let mut first_at: HashMap<&str, usize> = HashMap::new();
    for (i, r) in got.iter().enumerate() {
        let seen = body_of.entry(&r.id).or_insert(&r.body);
        assert_eq!(*seen, r.body, "event {} delivered with two bodies", r.id);
        first_at.entry(&r.id).or_insert(i);
    }
    let mut last_of_order: HashMap<String, usize> = HashMap::new();
    for e in feed {
        let id = e["id"].as_str().unwrap();
        let body = body_of
            .get(id)
            .unwrap_or_else(|| panic!("event {id} never delivered"));
        let sent: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            &sent, e,
            "event {id} delivered other than the feed shows it"
        );
        if let Some(order) = e["order"]["order_id"].as_str() {
            let at = first_at[id];
            if let Some(&before) = last_of_order.get(order) {
                assert!(
                    before < at,
                    "order {order}'s events arrived out of order at {id}"
                );
            }
            last_of_order.insert(order.to_owned(), at);
        }
    }
}
