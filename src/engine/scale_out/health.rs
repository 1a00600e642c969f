//! What the scale-out deployment says about its own health: whether it serves at all
//! (`/healthz`), the details an operator reads there, and the gauges `/metrics` refreshes.

use std::time::Duration;

use super::{redis_failed, ScaleOut};
use crate::domain::Error;
use crate::ledger::Ledger as _;

impl ScaleOut {
    /// Why the deployment is not serving, if it is not (`/healthz` answers 503): an evicting
    /// Redis, a background task down, Redis or PostgreSQL not answering.
    pub(super) async fn check_health(&self) -> Result<(), Error> {
        if self.settings.refusing() {
            return Err(Error::Unavailable(
                "Redis's maxmemory-policy may evict keys; claims are refused until it is \
                 noeviction again"
                    .into(),
            ));
        }
        if let Err(down) = self.supervisor.health() {
            return Err(Error::Unavailable(format!(
                "a background task is not running: {down}"
            )));
        }
        let mut conn = self.conn();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        tokio::time::timeout(Duration::from_secs(2), ping)
            .await
            .map_err(|_| Error::unavailable("Redis does not answer", "timed out"))?
            .map_err(redis_failed("Redis does not answer"))?;
        self.ledger
            .ping()
            .await
            .map_err(|e| Error::unavailable("PostgreSQL does not answer", e))
    }

    /// What `/healthz` shows of the deployment beyond up or down.
    pub(super) fn details(&self) -> serde_json::Value {
        let mut v = serde_json::json!({"redis_settings": self.settings.current()});
        v["refusing_claims"] = self.settings.refusing().into();
        v["gate_behind"] = self.behind.count().into();
        v
    }

    /// The deployment's gauges, refreshed before each `/metrics` answer.
    pub(super) fn refresh(&self, registry: &crate::telemetry::Registry) {
        self.settings.refresh_metrics(registry);
        self.hold_stats.refresh(registry);
        // Campaigns with holds are the admin's, so the label set is bounded as on embedded.
        for (id, units) in self.pending_units.lock().iter() {
            registry
                .campaign_gauge(crate::telemetry::catalog::CAMPAIGN_PENDING, id)
                .set(*units as f64);
        }
    }
}
