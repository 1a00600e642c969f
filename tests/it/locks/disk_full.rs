//! The embedded lock store on a full disk: a grant whose row could not be written is refused,
//! never answered, so no fence goes to two owners. The data directory is a real 4 MiB tmpfs
//! filled with a file (mounting needs root, as the CI machines have).

use std::sync::Arc;
use std::time::Duration;

use seckill::ledger::SqliteLedger;
use seckill::lock::embedded::EmbeddedLocks;
use seckill::lock::{Attempt, Locks};

use super::grant;
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
    let mut fences = vec![first.fence];
    let mut refused = 0;
    for owner in ["a", "b", "c", "d"] {
        match locks
            .acquire("job", owner, Duration::from_millis(200), Duration::ZERO)
            .await
        {
            Ok(Attempt::Granted(l)) => {
                fences.push(l.fence);
                // Let the lease end, so the next owner is not told "held".
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Ok(Attempt::Held { .. }) => panic!("no lease can be live here"),
            Err(e) => {
                eprintln!("{owner}: {e}");
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0,
        "the disk was full, yet every grant was answered granted"
    );
    filler.free();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let after = grant(&locks, "job", Duration::from_secs(5)).await;
    fences.push(after.fence);
    let mut sorted = fences.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        fences.len(),
        "a fence granted twice: {fences:?}"
    );
    assert_eq!(*fences.iter().max().unwrap(), after.fence, "{fences:?}");
    drop(locks);
}
