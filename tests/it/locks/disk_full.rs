//! The embedded lock store on a full disk: a grant whose row could not be written is refused,
//! never answered, so no fence goes to two owners. The data directory is a real 4 MiB tmpfs
//! filled with a file (mounting needs root, as the CI machines have).

use std::sync::Arc;
use std::time::Duration;

use seckill::ledger::SqliteLedger;
use seckill::lock::embedded::EmbeddedLocks;
use seckill::lock::Locks;

use super::{assert_fences_grow_once, grant, grants_under_fault};
use crate::storage_faults::disk_full::{Filler, Tmpfs};

async fn open(dir: &std::path::Path) -> Locks {
    let ledger = SqliteLedger::open(dir, true)
        .await
        .expect("ledger on tmpfs");
    Locks::new(Arc::new(EmbeddedLocks::new(Arc::new(ledger))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_never_grants_one_fence_twice() {
    let fs = Tmpfs::mount("4m")
        .expect("mounting a 4 MiB tmpfs was refused: run the tests as root (CI does)");
    let data = fs.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let locks = open(&data).await;
    let first = grant(&locks, "job", Duration::from_secs(5)).await;
    locks.release("job", &first.token).await.unwrap();

    let filler = Filler::Real(fs.path().join("filler"));
    filler.fill();
    let (mut fences, refused) = grants_under_fault(&locks).await;
    fences.insert(0, first.fence);
    assert!(
        refused > 0,
        "the disk was full, yet every grant was answered granted"
    );
    filler.free();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let after = grant(&locks, "job", Duration::from_secs(5)).await;
    fences.push(after.fence);
    assert_fences_grow_once(&fences, after.fence);
    drop(locks);
}
