//! How a failed Redis request is classified: refused before it was sent, rejected by Redis
//! before anything ran, or possibly executed. The gate answers "nothing was changed" only
//! for the first two, and "outcome unknown" otherwise, so these few lines decide what a
//! buyer is told after a fault; they have their own tests.

use std::time::Duration;

use redis::{ErrorKind, RedisError};

const NOT_SENT: &str = "Redis is unreachable; the command was not sent";

/// The error of a request refused because the link is down: it never reached Redis.
pub fn not_sent(down_for: Duration) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        NOT_SENT,
        format!("down for {} ms", down_for.as_millis()),
    ))
}

/// The error of a request for one connection refused because the link has moved on to
/// another: it never reached Redis.
pub fn moved_on() -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        NOT_SENT,
        "the connection it was meant for is gone".to_owned(),
    ))
}

/// The error of a gated request refused because this Redis was not yet checked against the
/// ledger (just reconnected, or its `run_id` changed): it never reached Redis.
pub fn unchecked() -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        NOT_SENT,
        "Redis is being checked against the ledger after a reconnect".to_owned(),
    ))
}

/// Whether `e` guarantees the command was not executed: refused by the link before sending,
/// or rejected by Redis before running anything (loading, out of memory, busy, read-only,
/// not primary).
pub fn surely_not_executed(e: &RedisError) -> bool {
    (e.kind() == ErrorKind::Client && e.to_string().contains(NOT_SENT))
        || e.is_connection_refusal()
        || matches!(
            e.code(),
            Some(
                "LOADING"
                    | "OOM"
                    | "BUSY"
                    | "READONLY"
                    | "MASTERDOWN"
                    | "CLUSTERDOWN"
                    | "TRYAGAIN"
                    | "NOREPLICAS"
                    | "MISCONF"
            )
        )
}

/// Whether `e` means this connection is no longer usable.
pub(super) fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_unrecoverable_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.code() == Some("READONLY")
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::ServerErrorKind;

    #[test]
    fn only_refusals_before_running_count_as_not_executed() {
        assert!(surely_not_executed(&not_sent(Duration::from_millis(3))));
        let loading =
            RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "LOADING"));
        assert!(surely_not_executed(&loading));
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(surely_not_executed(&refused));
        // Sent, then the connection broke or timed out: the script may have run.
        for kind in [
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::TimedOut,
        ] {
            let e = RedisError::from(std::io::Error::from(kind));
            assert!(!surely_not_executed(&e), "{kind:?}");
            assert!(breaks_connection(&e), "{kind:?}");
        }
        let script = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "ERR",
            "user script".into(),
        ));
        assert!(!surely_not_executed(&script));
        assert!(!breaks_connection(&script));
    }
}
