//! `seckill lock run` end to end: several runs of one name, started together, never run their
//! commands at the same time, and each command sees its fence — against a running seckill
//! over HTTP and against Redis directly.

use std::process::{Command, Stdio};

use crate::helpers::{App, TOKEN};
use crate::servers::RedisServer;

fn runs_never_overlap(target: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    // Each command appends "enter F", works a little, appends "leave F".
    let script = format!(
        "echo \"enter $SECKILL_LOCK_FENCE $SECKILL_LOCK_NAME\" >> {j}; sleep 0.2; \
         echo \"leave $SECKILL_LOCK_FENCE\" >> {j}",
        j = journal.display()
    );
    let runs: Vec<_> = (0..6)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_seckill"))
                .args(["lock", "run", "nightly-report", "--ttl", "5s"])
                .args(target)
                .args(["--", "sh", "-c", &script])
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut r in runs {
        assert!(r.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12, "{text}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let enter: Vec<&str> = pair[0].split(' ').collect();
        let leave: Vec<&str> = pair[1].split(' ').collect();
        assert_eq!(enter[0], "enter", "two commands overlapped:\n{text}");
        assert_eq!(leave[0], "leave", "two commands overlapped:\n{text}");
        assert_eq!(enter[1], leave[1]);
        assert_eq!(enter[2], "nightly-report");
        let fence: u64 = enter[1].parse().expect("the command sees a numeric fence");
        assert!(fence > last, "fences increase: {text}");
        last = fence;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_run_over_http_serialises_commands() {
    let app = App::spawn_with(|_| {}).await;
    let url = app.admin_url();
    tokio::task::spawn_blocking(move || {
        runs_never_overlap(&["--url", &url, "--admin-token", TOKEN])
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_run_on_redis_serialises_commands() {
    let r = RedisServer::start(&[]);
    let url = r.url();
    tokio::task::spawn_blocking(move || runs_never_overlap(&["--redis", &url]))
        .await
        .unwrap();
}

#[test]
fn lock_run_without_waiting_exits_75_when_held() {
    let r = RedisServer::start(&[]);
    let seckill = env!("CARGO_BIN_EXE_seckill");
    let mut first = Command::new(seckill)
        .args([
            "lock",
            "run",
            "busy",
            "--redis",
            &r.url(),
            "--",
            "sleep",
            "2",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::servers::wait_until("the first run to hold the lock", || {
        crate::servers::redis_raw(r.port, "EXISTS seckill:lock:{busy}:holder")
            .is_some_and(|s| s.starts_with(":1"))
    });
    let second = Command::new(seckill)
        .args([
            "lock",
            "run",
            "busy",
            "--wait",
            "0",
            "--redis",
            &r.url(),
            "--",
            "true",
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(second.code(), Some(75));
    assert!(first.wait().unwrap().success());
}
