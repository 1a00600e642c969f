//! The start-up reconcile: every campaign of the ledger brought level in Redis before the
//! instance serves, under a lease.
//!
//! Several instances often start together (a deploy, a restart of the fleet). Each would
//! otherwise walk every campaign and rewrite the same gate keys at once; under the lease
//! [`RECONCILE_JOB`] they take turns, and the fence of the last run is kept in PostgreSQL's
//! `job_fences` (refusing an older holder), so a paused instance cannot redo it behind a
//! newer one.

use std::sync::Arc;
use std::time::Duration;

use super::ScaleOut;

/// The lock (and `job_fences` row) of the start-up reconcile.
pub const RECONCILE_JOB: &str = "seckill-startup-reconcile";

/// Lease of one reconcile run, extended in the background while it lasts.
const LEASE: Duration = Duration::from_secs(30);

/// Reconciles every campaign of the ledger, one instance at a time.
pub(super) async fn reconcile_all(me: &Arc<ScaleOut>) -> anyhow::Result<()> {
    let owner = format!("seckill-{}", std::process::id());
    crate::lock::singleton::run_once(
        &me.locks,
        me.ledger.pool(),
        RECONCILE_JOB,
        &owner,
        LEASE,
        |_fence| async {
            for id in me.ledger.campaign_ids().await? {
                me.reconcile(&id).await.map_err(|e| {
                    anyhow::anyhow!("bringing campaign {id} level with the ledger: {e}")
                })?;
            }
            anyhow::Ok(())
        },
    )
    .await
}
