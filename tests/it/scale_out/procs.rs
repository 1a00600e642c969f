//! Real `seckill serve` / `seckill worker` processes for the scale-out tests.

use std::process::Child;
use std::sync::Arc;

use parking_lot::Mutex;
use seckill::bench::client::Client;

use crate::child;
use crate::helpers::TOKEN;

pub struct Seckill {
    child: Child,
    pub url: Option<String>,
    log: Arc<Mutex<Vec<String>>>,
}

fn scale_args(redis: &[String], postgres: &str) -> Vec<String> {
    vec![
        "--redis".into(),
        redis.join(","),
        "--postgres".into(),
        postgres.into(),
    ]
}

impl Seckill {
    /// `seckill serve` on a free port against `redis` and `postgres`, plus `extra` flags.
    pub fn serve(redis: &[String], postgres: &str, extra: &[&str]) -> Seckill {
        Self::serve_env(redis, postgres, extra, &[])
    }

    /// [`Seckill::serve`] with extra environment variables.
    pub fn serve_env(
        redis: &[String],
        postgres: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Seckill {
        let mut args: Vec<String> = ["serve", "--listen", "127.0.0.1:0", "--admin-token", TOKEN]
            .map(String::from)
            .to_vec();
        args.extend(scale_args(redis, postgres));
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start(args, env, child::SERVING)
    }

    /// `seckill worker` against `redis` and `postgres`, plus `extra` flags.
    pub fn worker(redis: &[String], postgres: &str, extra: &[&str]) -> Seckill {
        Self::worker_env(redis, postgres, extra, &[])
    }

    /// [`Seckill::worker`] with extra environment variables.
    pub fn worker_env(
        redis: &[String],
        postgres: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Seckill {
        let mut args = vec!["worker".to_string()];
        args.extend(scale_args(redis, postgres));
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start(args, env, child::WORKING)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn start(args: Vec<String>, env: &[(&str, &str)], ready: &str) -> Seckill {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = child::start(child::seckill(&args, env), ready);
        Seckill {
            child: started.child,
            url: started.url,
            log: started.log,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(self.url.as_deref().expect("a serve process"), TOKEN)
    }

    /// What the process logged so far.
    pub fn log_text(&self) -> String {
        self.log.lock().join("\n")
    }

    /// Waits up to `limit` for the process to exit on its own; its status.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }

    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Seckill {
    fn drop(&mut self) {
        self.sigkill();
    }
}

/// Whether process `pid` is stopped (SIGSTOP).
pub fn stopped(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name in parentheses.
    stat.rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('T'))
}

/// Waits up to `limit` for `done`, failing the test naming `what`.
pub async fn wait_for(what: &str, limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
