//! The data directory's filesystem fills up during a sale and is freed again.
//!
//! The test mounts a 16 MiB tmpfs for the data directory (these machines allow it as root)
//! and fills it with a file. Where mounting is refused it says so and makes the ledger writer
//! fail exactly as SQLite does on a full disk (`SECKILL_FAULTS=disk_full_while=…`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{refused_503, verify, won, Load};
use crate::process::Proc;

/// A size-limited tmpfs, unmounted on drop; `None` where mounting is not allowed.
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|o| o.status.success());
        ok.then_some(Tmpfs { dir })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// How the disk is made full: really, or by the writer's fault hook.
pub(crate) enum Filler {
    Real(PathBuf),
    Injected(PathBuf),
}

impl Filler {
    /// Fills the filesystem to the last byte.
    pub(crate) fn fill(&self) {
        match self {
            Filler::Real(file) => {
                let mut f = std::fs::File::create(file).unwrap();
                let chunk = vec![0u8; 64 * 1024];
                while f.write_all(&chunk).is_ok() {}
                let _ = f.sync_all();
            }
            Filler::Injected(flag) => std::fs::write(flag, b"full").unwrap(),
        }
    }

    pub(crate) fn free(&self) {
        match self {
            Filler::Real(file) | Filler::Injected(file) => std::fs::remove_file(file).unwrap(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_fails_claims_honestly_and_loses_no_acknowledged_win() {
    let fs = Tmpfs::mount("16m");
    let scratch = tempfile::tempdir().unwrap();
    let (root, filler, env) = match &fs {
        Some(fs) => {
            eprintln!("disk full: a real 16 MiB tmpfs filled with a file");
            (
                fs.path().to_owned(),
                Filler::Real(fs.path().join("filler")),
                None,
            )
        }
        None => {
            eprintln!("disk full: mounting a tmpfs was refused; injecting SQLITE_FULL at the ledger writer instead");
            let flag = scratch.path().join("full");
            let env = format!("disk_full_while={}", flag.display());
            (scratch.path().to_owned(), Filler::Injected(flag), Some(env))
        }
    };
    let data = root.join("data");
    let data_s = data.to_str().unwrap();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        crate::helpers::TOKEN,
        "--data",
        data_s,
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|e| ("SECKILL_FAULTS", e.as_str())).collect();
    let mut server = Proc::spawn(&args, &env);
    let client = server.client();
    client
        .create_campaign(&json!({"id": "full", "stock": 1_000_000, "per_user_limit": 1}))
        .await
        .unwrap();

    let load = Load::start(&client, "full", 8);
    load.until(Duration::from_secs(20), "first wins", |s| {
        s.count(won) > 200
    })
    .await;
    filler.fill();
    let filled = Instant::now();
    load.until(Duration::from_secs(30), "503s once the disk is full", |s| {
        s.count(refused_503) > 50
    })
    .await;
    let health = client
        .http()
        .get(client.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        health.status().as_u16(),
        503,
        "health reports the unwritable ledger"
    );
    let body = health.text().await.unwrap();
    assert!(body.contains("unwritable"), "{body}");
    let read = client.campaign("full").await;
    assert!(read.is_ok(), "reads keep working on a full disk: {read:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let wins_while_full = load.seen.count(won);
    filler.free();
    let freed = Instant::now();
    load.until(
        Duration::from_secs(5),
        "wins within 5 s of the space returning",
        |s| s.count(won) > wins_while_full + 100,
    )
    .await;
    eprintln!(
        "the disk was full for {:?}; selling again {:?} after the space returned",
        filled.elapsed() - freed.elapsed(),
        freed.elapsed()
    );
    let seen = load.stop().await;
    let refused = seen.count(refused_503);
    let log_lines = server
        .log
        .lock()
        .iter()
        .filter(|l| l.contains("the ledger cannot write"))
        .count();
    assert!(
        (1..=3).contains(&log_lines),
        "the fault is logged once, not per request: {log_lines} lines for {refused} refusals"
    );
    let orders = verify(&client, "full", &seen).await;
    eprintln!(
        "disk full: {} won, {refused} answered 503, {} lost, {orders} orders",
        seen.count(won),
        seen.lost.load(std::sync::atomic::Ordering::Relaxed)
    );

    // A graceful stop, then the same checks on what the restarted server reads back.
    server.signal(libc::SIGTERM);
    let status = tokio::task::spawn_blocking(move || server.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "SIGTERM exits 0, got {status}");
    let again = Proc::spawn(&args, &env);
    let after = verify(&again.client(), "full", &seen).await;
    assert_eq!(after, orders, "the restart reads back the same orders");

    // The same fault under `seckill bench`, whose verifier must pass.
    let url = again.url.clone();
    let bench = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args([
                "bench",
                "--url",
                &url,
                "--scenario",
                "hot",
                "-z",
                "4s",
                "-c",
                "8",
            ])
            .args(["--json", "--threads", "1", "--drain-interval", "50ms"])
            .env("SECKILL_ADMIN_TOKEN", crate::helpers::TOKEN)
            .output()
            .expect("seckill bench runs")
    });
    tokio::time::sleep(Duration::from_millis(1200)).await;
    filler.fill();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    filler.free();
    let out = bench.await.unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("bench JSON: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(
        out.status.success(),
        "the bench's verifier passes: {}",
        report["verification"]
    );
    let refused = report["non_2xx"]["503"].as_u64().unwrap_or(0);
    eprintln!(
        "disk full under seckill bench: {} won, {refused} answered 503, violations {}",
        report["outcomes"]["won"], report["verification"]["violations"]
    );
    assert!(refused > 0, "the bench met the full disk");
}
