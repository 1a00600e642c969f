//! The embedded lock store when fsync fails: a grant whose commit reported the error is
//! refused, never answered, so no fence goes to two owners.
//!
//! The acquire statement used `RETURNING` in autocommit, read with `fetch_optional`: sqlx reset
//! the statement after one row and dropped the commit's error, so with `--sync full` every
//! owner was told `acquired` with the same fence while the rows were rolled back. The fault is
//! real at the system-call boundary: a `seckill serve` process runs with an `LD_PRELOAD` shim
//! (`fsync_shim/fsync_fail.c`, compiled here with the C compiler) whose `fsync` and
//! `fdatasync` return EIO while a marker file exists, as a failing disk reports it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use seckill::lock::http::HttpLocks;
use seckill::lock::{Attempt, Locks};

use super::{assert_fences_grow_once, grant, grants_under_fault};
use crate::helpers::TOKEN;
use crate::process::Proc;

/// Builds the shim into `dir`; the C compiler is part of the machine image.
fn build_shim(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/locks/fsync_shim/fsync_fail.c");
    let lib = dir.join("libfsync_fail.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("no C compiler: install one (apt-get install gcc) to build the fsync shim");
    assert!(
        out.status.success(),
        "the fsync shim did not build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fsync_error_never_grants_one_fence_twice() {
    let dir = tempfile::tempdir().unwrap();
    let lib = build_shim(dir.path());
    let marker = dir.path().join("fsync-fails");
    let data = dir.path().join("data");
    let proc = Proc::spawn(
        &[
            "--listen",
            "127.0.0.1:0",
            "--admin-token",
            TOKEN,
            "--data",
            data.to_str().unwrap(),
            "--sync",
            "full",
        ],
        &[
            ("LD_PRELOAD", lib.to_str().unwrap()),
            ("SECKILL_TEST_FSYNC_FAIL", marker.to_str().unwrap()),
        ],
    );
    let locks = Locks::new(std::sync::Arc::new(HttpLocks::new(&proc.url, TOKEN)));
    let first = grant(&locks, "job", Duration::from_secs(5)).await;
    locks.release("job", &first.token).await.unwrap();

    std::fs::write(&marker, b"").unwrap();
    let (mut fences, refused) = grants_under_fault(&locks).await;
    fences.insert(0, first.fence);
    assert!(
        refused > 0,
        "every fsync failed, yet every grant was answered: {fences:?}"
    );
    std::fs::remove_file(&marker).unwrap();
    // The ledger may need a moment (or the engine a re-read) after the failed commits.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let after = loop {
        match locks
            .acquire("job", "after", Duration::from_secs(5), Duration::ZERO)
            .await
        {
            Ok(Attempt::Granted(l)) => break l,
            other => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no grant after fsync works again: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    fences.push(after.fence);
    assert_fences_grow_once(&fences, after.fence);
    drop(proc);
}
