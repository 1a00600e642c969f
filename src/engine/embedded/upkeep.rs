//! The embedded engine's upkeep, each run as a supervised task by [`Embedded::open`]:
//! idempotency answers pruned past their retention, and the in-process recovery the group
//! commit asks for after a commit whose outcome is unknown.

use std::time::Duration;

use super::Embedded;
use crate::ledger::{Ledger, WriterHealth};

impl Embedded {
    /// Drops idempotency answers past their retention, in the ledger and then in memory.
    ///
    /// The ledger goes first, and memory only once the ledger's rows are gone: a key the
    /// engine has forgotten is claimed afresh, and its new answer must not meet an old row
    /// (a rejection it replaces, a `won` the ledger refuses to shadow, see `sqlite/writes`).
    /// Memory pruned first left a window in which a new `won` met the old row and was lost.
    async fn prune(&self) {
        let now = crate::domain::now();
        let cutoff = now - self.idempotency_ttl;
        let rejected_cutoff = now - self.idem_limits.rejected_ttl;
        let rows = match self.ledger.prune_idempotency(cutoff).await {
            Ok(rows) => self
                .ledger
                .prune_rejected_idempotency(rejected_cutoff)
                .await
                .map(|r| r + rows),
            Err(e) => Err(e),
        };
        match rows {
            Ok(rows) => {
                let cells: Vec<_> = self.campaigns.read().values().cloned().collect();
                let dropped: usize = cells
                    .iter()
                    .map(|c| c.inner.lock().idem.prune(cutoff, now))
                    .sum();
                tracing::debug!(dropped, rows, "idempotency answers pruned");
            }
            Err(e) => {
                tracing::warn!(error = %e, "pruning idempotency answers failed; memory keeps them too")
            }
        }
        match self.ledger.prune_admin_keys(cutoff).await {
            Ok(rows) => tracing::debug!(rows, "admin idempotency keys pruned"),
            Err(e) => tracing::warn!(error = %e, "pruning admin idempotency keys failed"),
        }
    }
}

/// Waits for the writer to ask for an in-process recovery and performs it, retrying every
/// second while the ledger cannot be read.
pub(super) async fn recovery_loop(me: std::sync::Weak<Embedded>) {
    let Some(mut health) = me.upgrade().map(|me| me.commit.watch_health()) else {
        return;
    };
    loop {
        // Ends when the writer is gone (the engine was dropped).
        let reason = match health
            .wait_for(|h| matches!(h, WriterHealth::Recovering { .. }))
            .await
        {
            Ok(h) => match &*h {
                WriterHealth::Recovering { reason } => reason.clone(),
                _ => continue,
            },
            Err(_) => return,
        };
        let Some(me) = me.upgrade() else { return };
        if let Err(e) = me.recover(&reason).await {
            tracing::error!(error = %format!("{e:#}"), "re-reading the ledger failed; retrying in 1 s");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

pub(super) async fn prune_loop(me: std::sync::Weak<Embedded>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        match me.upgrade() {
            Some(me) => me.prune().await,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::domain::{ClaimRequest, NewCampaign, OrderState, Supply};
    use crate::engine::backend::Backend;
    use crate::engine::embedded::{Embedded, EmbeddedOptions};

    /// An engine opened on its own (no `App` holding a supervisor) keeps its background tasks
    /// for as long as it lives: a pending order past its deadline is expired by the sweeper.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_engine_opened_alone_keeps_its_sweeper() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = EmbeddedOptions::new(dir.path());
        opts.synchronous_full = false;
        let e = Embedded::open(opts).await.unwrap();
        let c = NewCampaign {
            id: "held".into(),
            supply: Supply::Stock(5),
            per_user_limit: 1,
            starts_at: None,
            ends_at: None,
            hold_seconds: Some(1),
            waiting_room: None,
        };
        e.create_campaign(c, None).await.unwrap();
        let req = ClaimRequest {
            user_id: "u1".into(),
            qty: 1,
        };
        let won = e.claim("held", req, None).await.unwrap();
        let id = won.order_id.expect("a pending order");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let order = e.order(&id).await.unwrap();
            if order.state == OrderState::Expired {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the order is still {:?} 10 s after a 1 s hold: the sweeper is not running",
                order.state
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(e.campaign("held").await.unwrap().remaining, 5);
    }
}
