//! The process's descriptor limit: raised to the hard limit at start, and what is left of it
//! for client connections.
//!
//! systemd and most shells start services with a soft limit of 1,024 open files, far below
//! what the kernel allows (the hard limit). Every client connection is a descriptor, so with
//! the soft limit a thousand slow clients would be enough to make `accept` fail for everyone.

/// Descriptors kept for everything that is not a client connection: the ledger's files,
/// database and Redis connections, the admin listener, logs.
pub const RESERVED: u64 = 64;

/// The soft and hard `RLIMIT_NOFILE` after raising soft to hard (`None` where unknown).
#[cfg(unix)]
pub fn raise() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        } else {
            tracing::warn!(error = %std::io::Error::last_os_error(), "could not raise the descriptor limit");
        }
    }
    let (soft, hard): (u64, u64) = (lim.rlim_cur, lim.rlim_max);
    tracing::info!(
        soft_before = before,
        soft,
        hard,
        "descriptor limit (RLIMIT_NOFILE)"
    );
    Some((soft, hard))
}

#[cfg(not(unix))]
pub fn raise() -> Option<(u64, u64)> {
    None
}

/// The connection cap that fits in `soft` descriptors: `wanted`, or less with a warning.
pub fn fit(wanted: usize, soft: Option<u64>) -> usize {
    let Some(soft) = soft else { return wanted };
    let room = soft.saturating_sub(RESERVED).max(1) as usize;
    if wanted > room {
        tracing::warn!(
            wanted,
            allowed = room,
            soft,
            "--max-connections lowered to fit the descriptor limit"
        );
        return room;
    }
    wanted
}
