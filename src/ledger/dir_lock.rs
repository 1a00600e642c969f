//! One writer per data directory.
//!
//! Two embedded servers on one directory (two containers on one volume, a restart while the old
//! process still drains, a second `seckill serve` typed by hand) would each believe they own
//! the stock and both answer `won` for the same units. Like PostgreSQL's `postmaster.pid` and
//! the file locks of LMDB and bbolt, the ledger takes an exclusive OS lock on
//! `<data>/seckill.lock` before it reads anything and holds it for the life of the process.
//! It is a `flock`, so the kernel drops it with the process, kill -9 included: a crash never
//! leaves a stale lock behind. The holder writes its pid into the file so the refusal can name
//! it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Held for as long as the process owns the data directory.
/// How long a lock recorded under this process's own pid is waited for.
const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
const OWN_LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether the lock file names this process as the holder.
fn held_by_this_process(file: &mut File) -> bool {
    let mut holder = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.read_to_string(&mut holder);
    holder.trim() == std::process::id().to_string()
}

#[derive(Debug)]
pub struct DirLock {
    _file: File,
    pub path: PathBuf,
}

impl DirLock {
    /// Locks `<dir>/seckill.lock`, or fails naming the process that holds it.
    pub fn acquire(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create data directory {}", dir.display()))?;
        private(dir, 0o700)?;
        let path = dir.join("seckill.lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // A lock this very process held a moment ago (a ledger closed for a restart in the
        // same process) can outlive its close for as long as a child forked meanwhile by
        // another thread has not reached its exec: the child's copy of the descriptor holds
        // the lock until then. Such a holder is waited for, briefly; another process is not.
        let mut waited = std::time::Duration::ZERO;
        let locked = loop {
            match file.try_lock() {
                Err(TryLockError::WouldBlock)
                    if waited < OWN_LOCK_WAIT && held_by_this_process(&mut file) =>
                {
                    std::thread::sleep(OWN_LOCK_POLL);
                    waited += OWN_LOCK_POLL;
                }
                other => break other,
            }
        };
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                file.seek(SeekFrom::Start(0))?;
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = if holder.is_empty() { "unknown" } else { holder };
                anyhow::bail!(
                    "data directory {} is in use by another seckill process (pid {holder}); \
                     stop it first, or give this one its own --data",
                    dir.display()
                );
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        writeln!(file, "{}", std::process::id())?;
        Ok(Self { _file: file, path })
    }
}

/// Makes `path` readable by its owner only (`mode`: 0o700 for the data directory, 0o600 for
/// the ledger's files): the ledger holds every unclaimed prize code and every buyer's id.
pub fn private(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(()); // not created yet (a WAL file before the first write)
    };
    let was = meta.permissions().mode() & 0o777;
    if was != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot make {} private ({mode:o})", path.display()))?;
        tracing::info!(path = %path.display(), from = format!("{was:o}"), to = format!("{mode:o}"), "made private: the ledger holds unclaimed codes and buyers' ids");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        let err = DirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(err.contains("in use by another seckill process"), "{err}");
        assert!(err.contains(&std::process::id().to_string()), "{err}");
        drop(first);
        DirLock::acquire(dir.path()).unwrap();
    }
}
