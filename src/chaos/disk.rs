//! The embedded data directory's disk, which the nemesis fills up and frees.
//!
//! A full disk is only tested for real when the filesystem really runs out of space: SQLite
//! then meets `ENOSPC` in the middle of a WAL append or a checkpoint, wherever it happens to
//! be. As root, the data directory lives on a tmpfs of its own (256 MiB) that the fault
//! fills with a file to the last byte and frees by deleting it. Where mounting is refused
//! (not root, a container without `CAP_SYS_ADMIN`), the server is started with the
//! `SECKILL_FAULTS` hook `disk_full_while` instead, which makes every ledger batch fail as
//! `SQLITE_FULL` while a flag file exists; the campaign says which of the two ran.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Size of the tmpfs the data directory lives on: room for a whole schedule's ledger. A
/// storm of 600,000 keyed claims keeps 100,000 rejected Idempotency-Keys per campaign (the
/// default cap), about 12 MB of SQLite; 16 MB filled up without any fault and left the
/// ledger unable to write for the rest of the schedule. The disk-full fault fills what is
/// left, whatever the size (RAM, written at memory speed).
pub const TMPFS_SIZE: &str = "256m";

pub enum DataDisk {
    /// A real tmpfs mounted at `mount`; full while `filler` exists.
    Tmpfs { mount: PathBuf, filler: PathBuf },
    /// The server's fault hook: full while `flag` exists.
    Injected { flag: PathBuf },
}

impl DataDisk {
    /// Mounts a tmpfs at `root/disk`, or falls back to the fault hook's flag in `root`.
    pub fn new(root: &Path) -> anyhow::Result<DataDisk> {
        let mount = root.join("disk");
        std::fs::create_dir_all(&mount)?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
            .arg(&mount)
            .output()
            .is_ok_and(|o| o.status.success());
        Ok(if mounted {
            DataDisk::Tmpfs {
                filler: mount.join("filler"),
                mount,
            }
        } else {
            tracing::warn!(
                "mounting a tmpfs for the data directory was refused (not root?); the disk-full \
                 fault injects SQLITE_FULL at the ledger writer instead"
            );
            DataDisk::Injected {
                flag: root.join("disk-full"),
            }
        })
    }

    /// The directory the data directory goes in.
    pub fn root(&self) -> Option<&Path> {
        match self {
            DataDisk::Tmpfs { mount, .. } => Some(mount),
            DataDisk::Injected { .. } => None,
        }
    }

    /// The `SECKILL_FAULTS` setting the server needs, if any.
    pub fn fault_env(&self) -> Option<String> {
        match self {
            DataDisk::Tmpfs { .. } => None,
            DataDisk::Injected { flag } => Some(format!("disk_full_while={}", flag.display())),
        }
    }

    /// What "disk full" means in this run, for the report.
    pub fn how(&self) -> &'static str {
        match self {
            DataDisk::Tmpfs { .. } => "a real 256 MiB tmpfs filled with a file",
            DataDisk::Injected { .. } => {
                "SQLITE_FULL injected at the ledger writer (mount refused)"
            }
        }
    }

    /// Fills the disk to its last byte.
    pub async fn fill(&self) -> anyhow::Result<()> {
        match self {
            DataDisk::Tmpfs { filler, .. } => {
                let filler = filler.clone();
                tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                    let mut f = std::fs::File::create(&filler)?;
                    let chunk = vec![0u8; 64 * 1024];
                    while f.write_all(&chunk).is_ok() {}
                    // The last partial chunk: byte by byte until ENOSPC.
                    while f.write_all(&[0]).is_ok() {}
                    Ok(())
                })
                .await??;
            }
            DataDisk::Injected { flag } => std::fs::write(flag, b"full")?,
        }
        Ok(())
    }

    /// Frees the disk (nothing to do if it is not full).
    pub fn free(&self) -> anyhow::Result<()> {
        let file = match self {
            DataDisk::Tmpfs { filler, .. } => filler,
            DataDisk::Injected { flag } => flag,
        };
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for DataDisk {
    fn drop(&mut self) {
        if let DataDisk::Tmpfs { mount, .. } = self {
            // Lazily: the server may still be exiting.
            let _ = Command::new("umount").arg("-l").arg(&*mount).status();
        }
    }
}
