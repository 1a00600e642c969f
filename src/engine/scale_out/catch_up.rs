//! Admin changes the ledger saved but Redis did not take are applied as soon as Redis is back.
//!
//! Restock, pause/resume/close and cancel commit to PostgreSQL first and then apply to the
//! gate (see `admin.rs`). When Redis fails between the two, the client hears a 503 saying the
//! change is saved but not applied, and the gate stays behind the ledger: a cancelled order's
//! units are never sold again, a pause is not enforced, `remaining` disagrees with the
//! orders. Waiting for the next admin change or a restart to level it (as before) left a sale
//! under-sold for good when nobody retried; the fault campaign (`seckill chaos --only
//! redis-server`) found exactly that. So every campaign whose admin change failed with a 503
//! is remembered here, and a supervised task reconciles it with the ledger (`reconcile`:
//! restocks, status, releases of cancelled orders, each idempotent) every half second until
//! that succeeds.

use std::collections::HashSet;
use std::sync::Weak;
use std::time::Duration;

use super::ScaleOut;
use crate::domain::Error;

/// The supervised task name.
pub const TASK: &str = "redis-catch-up";

/// How often campaigns left behind are retried.
const RETRY: Duration = Duration::from_millis(500);

/// Campaigns whose gate may be behind the ledger after a failed admin change.
#[derive(Debug, Default)]
pub struct Behind(parking_lot::Mutex<HashSet<String>>);

impl Behind {
    /// Remembers `campaign` if `result` is a 503 (the change may be saved but not applied).
    pub fn note<T>(&self, campaign: &str, result: &Result<T, Error>) {
        if matches!(result, Err(Error::Unavailable(_))) {
            tracing::warn!(campaign, "the gate may be behind the ledger; catching up");
            self.0.lock().insert(campaign.to_owned());
        }
    }

    /// Remembers `campaign` to be levelled with the ledger (after Redis came back from an
    /// older snapshot its restocks, status or cancels may be missing).
    pub fn add(&self, campaign: String) {
        self.0.lock().insert(campaign);
    }

    /// How many campaigns are being caught up (`GET /healthz` reports it as `gate_behind`).
    pub fn count(&self) -> usize {
        self.0.lock().len()
    }

    fn snapshot(&self) -> Vec<String> {
        self.0.lock().iter().cloned().collect()
    }

    fn done(&self, campaign: &str) {
        self.0.lock().remove(campaign);
    }
}

/// Reconciles every campaign left behind until it succeeds; ends with the engine.
pub async fn run(engine: Weak<ScaleOut>) -> anyhow::Result<()> {
    loop {
        tokio::time::sleep(RETRY).await;
        let Some(me) = engine.upgrade() else {
            return Ok(());
        };
        for id in me.behind.snapshot() {
            let before = me.before_change();
            let reconciled = me.reconcile(&id).await;
            match me.replicated("the catch-up", before, reconciled).await {
                Ok(()) => {
                    me.behind.done(&id);
                    me.stock.changed(&id).await;
                    tracing::info!(campaign = %id, "the gate caught up with the ledger");
                }
                Err(Error::NotFound(_)) => me.behind.done(&id),
                Err(e) => tracing::debug!(campaign = %id, error = %e, "still behind"),
            }
        }
    }
}
