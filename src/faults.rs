//! Storage faults (and one pause of the scale-out pipeline) a test can inject into a real
//! `seckill serve` or `seckill worker` process.
//!
//! Some faults cannot be produced from outside on every machine: an I/O error that SQLite
//! reports *after* its COMMIT reached the file, a panic inside the ledger writer, or (where
//! mounting a small filesystem is refused) a full disk. The integration tests set the hidden
//! `SECKILL_FAULTS` variable to make the ledger writer behave as if that happened, at the exact
//! place the real fault would surface, so the recovery code under test is the production code.
//!
//! `SECKILL_FAULTS` is a comma-separated list; unset (the normal case) every check is one
//! relaxed atomic load:
//!
//! | entry | effect |
//! | --- | --- |
//! | `commit_unknown_after=N` | the N-th non-empty batch commits, then reports an I/O error |
//! | `writer_panic_after=N` | the N-th non-empty batch panics before it is written |
//! | `disk_full_while=PATH` | while PATH exists, every batch (waiting-room joins too) fails as SQLite's `SQLITE_FULL` |
//! | `io_error_while=PATH` | while PATH exists, every batch (waiting-room joins too) ends in a disk I/O error at its commit (an fsync that failed): the odd ones committed, the even ones rolled back, so recovery meets both truths behind the one error |
//! | `stop_after_reclaim=PATH` | if PATH exists when the pipeline has reclaimed entries and is about to write them, PATH is removed and the process stops itself with SIGSTOP (a pause at the worst moment for the reclaim lease) |

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

#[derive(Debug, Default)]
struct Faults {
    commit_unknown_after: Option<u64>,
    writer_panic_after: Option<u64>,
    disk_full_while: Option<PathBuf>,
    io_error_while: Option<PathBuf>,
    stop_after_reclaim: Option<PathBuf>,
}

static FAULTS: OnceLock<Faults> = OnceLock::new();
static BATCHES: AtomicU64 = AtomicU64::new(0);

fn faults() -> &'static Faults {
    FAULTS.get_or_init(|| parse(&std::env::var("SECKILL_FAULTS").unwrap_or_default()))
}

fn parse(spec: &str) -> Faults {
    let mut f = Faults::default();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry.split_once('=').unwrap_or((entry, ""));
        match name {
            "commit_unknown_after" => f.commit_unknown_after = value.parse().ok(),
            "writer_panic_after" => f.writer_panic_after = value.parse().ok(),
            "disk_full_while" => f.disk_full_while = Some(PathBuf::from(value)),
            "io_error_while" => f.io_error_while = Some(PathBuf::from(value)),
            "stop_after_reclaim" => f.stop_after_reclaim = Some(PathBuf::from(value)),
            _ => tracing::warn!(entry, "unknown SECKILL_FAULTS entry ignored"),
        }
    }
    if !spec.trim().is_empty() {
        tracing::warn!(?f, "storage fault injection is on (a test hook)");
    }
    f
}

/// What the ledger writer should pretend for the batch it is about to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFault {
    None,
    /// Write and commit the batch, then report an I/O error (an ambiguous commit).
    UnknownAfterCommit,
    /// Write the batch, roll it back, then report the same I/O error (the other truth of an
    /// ambiguous commit).
    UnknownRolledBack,
    /// Panic before writing anything.
    Panic,
    /// Fail before writing anything, as SQLite does when the disk is full.
    DiskFull,
}

/// Called once per non-empty batch by the ledger writer.
pub fn next_batch() -> BatchFault {
    let f = faults();
    if f.commit_unknown_after.is_none()
        && f.writer_panic_after.is_none()
        && f.disk_full_while.is_none()
        && f.io_error_while.is_none()
    {
        return BatchFault::None;
    }
    let n = BATCHES.fetch_add(1, Ordering::Relaxed) + 1;
    if f.disk_full_while.as_ref().is_some_and(|p| p.exists()) {
        return BatchFault::DiskFull;
    }
    if f.io_error_while.as_ref().is_some_and(|p| p.exists()) {
        return if n % 2 == 1 {
            BatchFault::UnknownAfterCommit
        } else {
            BatchFault::UnknownRolledBack
        };
    }
    if f.writer_panic_after == Some(n) {
        return BatchFault::Panic;
    }
    if f.commit_unknown_after == Some(n) {
        return BatchFault::UnknownAfterCommit;
    }
    BatchFault::None
}

/// Called once per non-empty batch of waiting-room joins by the embedded ledger's writer:
/// the full disk and the I/O errors at commit of [`next_batch`], counted apart so the claims'
/// numbered faults stay where they were.
pub fn room_batch() -> BatchFault {
    static ROOM_BATCHES: AtomicU64 = AtomicU64::new(0);
    let f = faults();
    if f.disk_full_while.as_ref().is_some_and(|p| p.exists()) {
        return BatchFault::DiskFull;
    }
    if f.io_error_while.as_ref().is_some_and(|p| p.exists()) {
        let n = ROOM_BATCHES.fetch_add(1, Ordering::Relaxed) + 1;
        return if n % 2 == 1 {
            BatchFault::UnknownAfterCommit
        } else {
            BatchFault::UnknownRolledBack
        };
    }
    BatchFault::None
}

/// Called by the pipeline between reclaiming entries and writing them.
pub fn after_reclaim() {
    let Some(path) = &faults().stop_after_reclaim else {
        return;
    };
    if std::fs::remove_file(path).is_ok() {
        tracing::warn!("test hook: stopping this process after a reclaim (SIGSTOP)");
        // SAFETY: raise only sends a signal to this process.
        unsafe { libc::raise(libc::SIGSTOP) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_entries_and_ignores_unknown_ones() {
        let f = parse(
            "commit_unknown_after=3, writer_panic_after=x,disk_full_while=/tmp/f,nope,\
             stop_after_reclaim=/tmp/s,io_error_while=/tmp/i",
        );
        assert_eq!(f.io_error_while, Some(PathBuf::from("/tmp/i")));
        assert_eq!(f.stop_after_reclaim, Some(PathBuf::from("/tmp/s")));
        assert_eq!(f.commit_unknown_after, Some(3));
        assert_eq!(f.writer_panic_after, None);
        assert_eq!(f.disk_full_while, Some(PathBuf::from("/tmp/f")));
    }
}
