//! The nemesis that steps the embedded server's wall clock by minutes, forward or back, and
//! steps it back to the real time a few seconds later.
//!
//! Holds, idempotency retention and a campaign's opening hours are all about time, and a
//! machine's wall clock is not monotonic: NTP steps it after a suspend, a VM migration or a
//! bad start, by minutes at times. The promise (docs/HOLDS.md, "Time") is that a step of
//! the system clock moves no deadline: a confirm sent before `pay_by` on the buyer's clock is
//! accepted, one sent after it is refused, whatever the server's clock did meanwhile. The
//! bench holds every confirm answer to that on its own clock (`bench::payer`).
//!
//! The step is real: the server runs under Debian's libfaketime (`LD_PRELOAD`), which reads
//! the offset from a file the nemesis rewrites (`FAKETIME_TIMESTAMP_FILE`, re-read once a
//! second); the monotonic clock is left alone, as NTP leaves it. The fault holds the server's
//! process lock, so no restart of the server falls inside a step (a server started on a wrong
//! clock has the wrong time, which no engine can know).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::cluster::Cluster;

/// Where Debian and others install the library.
const LIBRARIES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// How often libfaketime reads the offset file again.
const REREAD: Duration = Duration::from_secs(1);

/// The installed libfaketime, or an error saying how to install it.
pub fn library() -> anyhow::Result<PathBuf> {
    LIBRARIES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("libfaketime not found (the clock-step fault needs it): apt-get install faketime")
}

/// The environment that runs a process under libfaketime with its offset read from `file`
/// (written here as no offset).
pub fn env(file: &Path) -> anyhow::Result<Vec<(String, String)>> {
    std::fs::write(file, "+0\n")?;
    let lib = library()?;
    let secs = REREAD.as_secs().to_string();
    Ok([
        ("LD_PRELOAD", lib.display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
        ("FAKETIME_CACHE_DURATION", secs),
        // Both spellings: libfaketime renamed it in 0.9.10.
        ("DONT_FAKE_MONOTONIC", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect())
}

/// Steps the server's wall clock by `by` seconds (negative: back) for `hold`, then back to the
/// real time; returns a note for the report.
pub async fn step(cluster: &Cluster, by: i32, hold: Duration) -> anyhow::Result<String> {
    let file = cluster
        .clock_file
        .as_deref()
        .context("this deployment's server does not run under libfaketime")?;
    std::fs::write(file, format!("{by:+}\n"))?;
    // The step lands within one re-read; so does the way back.
    tokio::time::sleep(hold + REREAD).await;
    std::fs::write(file, "+0\n")?;
    tokio::time::sleep(REREAD).await;
    Ok(format!(
        "the server's clock read {:+.1} min for {:.1}s",
        f64::from(by) / 60.0,
        hold.as_secs_f64()
    ))
}
