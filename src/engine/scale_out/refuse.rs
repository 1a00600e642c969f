//! When a claim is refused without reaching the gate, or the gate failed it: the honest 503s.
//!
//! A client must be able to tell "nothing was changed" (retry freely) from "it may have been
//! processed" (retry with the same Idempotency-Key to learn the outcome); these functions
//! decide which one a failure is.

use std::time::Duration;

use super::scripts::Claimed;
use super::settings;
use crate::domain::Error;
use crate::redis_conn::link::surely_not_executed;
use crate::supervise::Supervisor;

/// Claims are refused while a task they depend on — the in-process pipeline (a `won` with
/// nothing moving orders into the ledger) or the stock refresher (a stale `sold_out` could
/// outlive a restock without bound) — has been down longer than this.
pub const DEPENDENCY_GRACE: Duration = Duration::from_secs(1);

/// Longest a claim waits for Redis (or for its campaign's check, `lineage.rs`) before
/// answering 503.
pub(super) const CLAIM_TIMEOUT: Duration = Duration::from_secs(5);

/// The answer to a claim the gate decided nothing about (the campaign fenced, not checked on
/// its Redis Cluster node, or too few replicas in sync): nothing was changed.
pub fn undecided(campaign: &str, why: &Claimed) -> Error {
    let why = match why {
        Claimed::Fenced => {
            format!("campaign '{campaign}' is being rebuilt from the ledger after Redis lost state")
        }
        Claimed::Unchecked => format!(
            "campaign '{campaign}' moved to another Redis Cluster node that is being checked \
             against the ledger"
        ),
        Claimed::NoReplicas => {
            "fewer Redis replicas are in sync than --redis-wait-replicas asks for".to_owned()
        }
        Claimed::Missing | Claimed::Answer(_) => format!("campaign '{campaign}' is unavailable"),
    };
    Error::Unavailable(format!(
        "{why}; the claim was not processed and nothing was changed, retry later"
    ))
}

/// Whether the failed script call `e` surely did not run (the link refused it while Redis is
/// down, or Redis rejected it before running), so the caller may answer "nothing was
/// changed". Never on a cluster (`cluster`): its client hides which node and connection the
/// call took, so no error it returns proves the script did not run (redis 1.x answers every
/// request in flight with the last error of a failed slot refresh, e.g. a refused connection
/// to a dead node, while the script may have run on a live one).
pub(super) fn not_run(cluster: bool, e: &redis::RedisError) -> bool {
    !cluster && surely_not_executed(e)
}

/// The answer to a claim whose script call failed: "nothing was changed" only when it
/// surely did not run ([`not_run`]); otherwise it may have run before the connection broke,
/// and the client is told so.
pub fn claim_failed(campaign: &str, cluster: bool) -> impl Fn(anyhow::Error) -> Error + '_ {
    move |e| {
        let not_run = e
            .downcast_ref::<redis::RedisError>()
            .is_some_and(|e| not_run(cluster, e));
        if not_run {
            tracing::debug!(error = %format!("{e:#}"), campaign, "claim refused: Redis unavailable");
            return Error::Unavailable(
                "Redis is unavailable; the claim was not processed and nothing was changed, \
                 retry later"
                    .into(),
            );
        }
        tracing::error!(error = %format!("{e:#}"), campaign, "claim script failed");
        Error::OutcomeUnknown(
            "the claim could not be completed by Redis; it may or may not have been \
             processed: retry with the same Idempotency-Key to learn its outcome"
                .into(),
        )
    }
}

/// Refuses claims while Redis may evict keys (and that was not allowed) or a task in `depends`
/// has been down past [`DEPENDENCY_GRACE`].
pub fn unless_dependencies_up(
    settings: &settings::Watch,
    supervisor: &Supervisor,
    depends: &[&'static str],
) -> Result<(), Error> {
    if settings.refusing() {
        return Err(Error::Unavailable(
            "Redis may evict keys (its maxmemory-policy is not noeviction), which can lose \
             answered orders; the claim was not processed and nothing was changed, retry \
             later"
                .into(),
        ));
    }
    for task in depends {
        if let Some(down) = supervisor.down_for(task) {
            if down > DEPENDENCY_GRACE {
                return Err(Error::Unavailable(format!(
                    "this instance's {task} task is restarting; the claim was not processed \
                     and nothing was changed, retry later"
                )));
            }
        }
    }
    Ok(())
}
