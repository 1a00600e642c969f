//! A sink's lease, kept while its holder delivers: renewed every [`RENEW`], and given up in
//! time — before the lease can lapse and another instance take the sink over — when renewals
//! stop getting through.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{Delivery, LEASE, RENEW};

/// Aborts the lease keeper when the loop that holds the lease ends.
pub(super) struct KeepLease(pub(super) tokio::task::JoinHandle<()>);

impl Drop for KeepLease {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease every [`RENEW`] and says it is lost when another owner holds it, the sink
/// was disabled or removed, or no renewal got through in time: the holder gives up a whole
/// [`RENEW`] before the lease it last renewed can lapse (`held_until`, counted from when that
/// renewal was sent), however long a renewal hangs.
pub(super) async fn keep(
    d: Arc<Delivery>,
    id: String,
    fence: i64,
    mut held_until: Instant,
    lost: watch::Sender<bool>,
) {
    loop {
        let give_up = held_until - RENEW;
        tokio::time::sleep_until((Instant::now() + RENEW).min(give_up)).await;
        if Instant::now() >= give_up {
            break;
        }
        let issued = Instant::now();
        let now = crate::clock::now().timestamp_micros();
        match tokio::time::timeout_at(give_up, d.ledger.lease(&id, &d.owner, now, LEASE)).await {
            Ok(Ok(Some((f, _)))) if f == fence => held_until = issued + LEASE,
            Ok(Ok(_)) => break,
            Ok(Err(e)) => {
                tracing::warn!(sink = %id, error = %format!("{e:#}"), "renewing a sink's lease failed");
            }
            Err(_) => tracing::warn!(sink = %id, "renewing a sink's lease took too long"),
        }
    }
    let _ = lost.send(true);
}
