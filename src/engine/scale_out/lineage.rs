//! Never serve a campaign from a Redis Cluster node before it was checked against the ledger.
//!
//! A single Redis or a Sentinel primary is checked as a whole after every reconnect and
//! whenever its `run_id` changes (`fresh.rs`). A Cluster has no single link to watch: a
//! failover moves one master's slots to its replica while the client keeps its other
//! connections, and the replica may have missed the last writes the master answered (the
//! replication is asynchronous, and `--redis-wait-replicas` cannot be used with a Cluster).
//! Serving from it would reissue order numbers the ledger already holds for earlier buyers,
//! sell their units and codes again, and confirm or expire orders the ledger has resolved
//! otherwise (the fault campaign's Cluster deployment found all three: confirms answered 200
//! for orders that had expired, and wins the ledger refused).
//!
//! So every campaign carries the replication id (`master_replid`) of the lineage it was last
//! checked on, and the scripts that decide on it — claims, confirms, hold cancels, expiries —
//! compare it with the id of the node running them, which a promoted replica and a restarted
//! master change. On a mismatch they change nothing and answer `unchecked`; the instance then
//! checks that one campaign as `fresh.rs` checks every campaign of a single Redis (numbering
//! not behind the ledger, no order pending that the ledger holds resolved; otherwise dropped
//! and rebuilt, or fenced until its stream is drained) and marks it checked on the lineage
//! its read saw, so a failover in between leaves it unchecked on the new node. Before the mark
//! it applies the admin changes the node may have missed (a pause answered on the old master
//! must hold on the new one), and the ledger is read once every pipeline transaction already
//! writing the campaign has ended. One check per campaign at a time per instance; concurrent
//! requests wait for it, 5 s at most. A campaign is checked once when it is created
//! (`admin.rs`), so its opening storm does not wait for a check its first batch started. The
//! cost on the hot path is one `INFO replication` per script call on a Cluster, none elsewhere.
//!
//! A consumer that read entries from the old master and commits them only after the check
//! would still write what the new node never had: the check records in the ledger, in the
//! transaction that reads it, which lineages the campaign left and at which stream id, and the
//! entries carry their lineage (`lineage` field), so the pipeline refuses those the failover
//! lost (`ledger/postgres/lineage.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use super::fresh::OutOfService;
use super::keys::Keys;
use super::ScaleOut;
use crate::domain::Error;
use crate::ledger::{stream_pos, NodeRead};

/// The checks running in this instance, one per campaign.
#[derive(Default)]
pub(super) struct Checks(parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl Checks {
    fn one(&self, campaign: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.0
            .lock()
            .entry(campaign.to_owned())
            .or_default()
            .clone()
    }
}

/// Rounds of read, compare and rebuild before giving up (the node keeps changing).
const ROUNDS: usize = 4;

/// Longest a request waits for its campaign's check: a claim's own bound.
const CHECK_TIMEOUT: std::time::Duration = super::refuse::CLAIM_TIMEOUT;

fn failed(e: impl std::fmt::Display) -> Error {
    Error::unavailable(
        "checking the campaign against the ledger on its Redis Cluster node failed; nothing \
         was changed, retry later",
        e,
    )
}

impl ScaleOut {
    /// Checks campaign `id` on the lineage of the Cluster node now serving it and marks it
    /// checked there (rebuilding it from the ledger first if it is behind). Bounded: the
    /// requests waiting for it are answered 503 "nothing was changed" after [`CHECK_TIMEOUT`].
    pub(super) async fn check_lineage(&self, id: &str) -> Result<(), Error> {
        tokio::time::timeout(CHECK_TIMEOUT, self.check_lineage_now(id))
            .await
            .unwrap_or_else(|_| {
                Err(failed(format!(
                    "no answer from Redis or PostgreSQL within {CHECK_TIMEOUT:?}"
                )))
            })
    }

    /// The campaign as the node serving it holds it (`lineage.lua`'s read).
    async fn read_node(&self, k: &Keys) -> Result<Vec<String>, Error> {
        self.scripts
            .lineage
            .key(k.meta())
            .key(k.seq())
            .key(k.held())
            .key(k.orders())
            .arg("")
            .invoke_async(&mut self.conn())
            .await
            .map_err(failed)
    }

    async fn check_lineage_now(&self, id: &str) -> Result<(), Error> {
        let one = self.lineage.one(id);
        let _only = one.lock().await;
        let script = &self.scripts.lineage;
        let k = Keys::new(id);
        for _ in 0..ROUNDS {
            let read = self.read_node(&k).await?;
            let [lineage, checked, seq, last, pending @ ..] = read.as_slice() else {
                // Not in Redis (another instance is rebuilding it, or Redis lost it):
                // installed from the ledger, then checked like any other.
                match self.install_from_ledger(id).await {
                    Ok(()) | Err(Error::NotFound(_)) => continue,
                    Err(e) => return Err(e),
                }
            };
            if checked == lineage {
                return Ok(());
            }
            let node = NodeRead {
                lineage: lineage.clone(),
                checked: checked.clone(),
                seq: seq.parse().map_err(failed)?,
                last: stream_pos(last).ok_or_else(|| failed(format!("stream id {last:?}")))?,
                pending: pending.to_vec(),
            };
            let (verdict, recorded) = self.ledger.check_lineage(id, &node).await.map_err(failed)?;
            let (seq, ledger_seq) = (node.seq, verdict.seq);
            if !verdict.settled(&node) {
                let force = seq >= ledger_seq;
                match self
                    .take_out_of_service(id, (seq, ledger_seq), force, verdict.resolved)
                    .await
                    .map_err(failed)?
                {
                    OutOfService::Fenced => {
                        return Err(Error::Unavailable(format!(
                            "campaign '{id}' is being rebuilt from the ledger after a Redis \
                             Cluster failover lost writes; nothing was changed, retry later"
                        )))
                    }
                    OutOfService::Dropped => self.reconcile(id).await?,
                    OutOfService::Kept => {}
                }
                continue;
            }
            // The record commits only if the node still serves the lineage read (see
            // `Recorded`): a read gone stale while it waited for the ledger is read again.
            if let Some(recorded) = recorded {
                if self.read_node(&k).await?.first() != Some(&node.lineage) {
                    continue;
                }
                recorded.commit().await.map_err(failed)?;
            }
            // Admin changes the node may have missed (a pause or a close answered on the old
            // master, restocks, releases of cancelled orders) are applied before it serves:
            // the ledger does not hold a paused campaign's claims back.
            self.reconcile(id).await?;
            let marked: i64 = script
                .key(k.meta())
                .key(k.seq())
                .key(k.held())
                .key(k.orders())
                .arg(lineage)
                .arg(ledger_seq)
                .invoke_async(&mut self.conn())
                .await
                .map_err(failed)?;
            if marked == 1 {
                tracing::warn!(campaign = %id, %lineage, redis_seq = seq, ledger_seq, "campaign checked against the ledger on the Redis Cluster node now serving it (a failover or a restart); serving it");
                return Ok(());
            }
        }
        Err(failed(format!(
            "the node serving campaign '{id}' kept changing over {ROUNDS} checks"
        )))
    }
}
