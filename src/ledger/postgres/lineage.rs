//! The ledger's side of a Redis Cluster failover: which replication lineage a campaign's stream
//! entries may still come from.
//!
//! When a Cluster node is promoted after missing writes, the instances check each campaign on
//! it against the ledger before it serves (`engine/scale_out/lineage.rs`): numbering not behind, no
//! order pending there that the ledger holds resolved. That check reads the ledger as it is; a
//! consumer that read entries from the old master before the failover and commits them after
//! the check (it was frozen, or slow) would still write orders the new node never had, whose
//! numbers, units and codes the new node then issues again: a later buyer told `won` is
//! refused, a unit is sold twice.
//!
//! So the check records, in the transaction that reads the ledger and under the campaign's row
//! lock the pipeline also takes, that the lineages the campaign was served from before are
//! *left* at the last stream id the new node has. Everything the new node has from an old
//! lineage has an id up to that one (a replica holds a prefix of its master's stream, ids
//! increase); an entry of a left lineage above it was never there. The pipeline refuses such an
//! entry ([`lost`]) — unless the ledger holds exactly what it asks already (a redelivery of a
//! write made before the check) — and the consumer records it in `failed_orders`: the win or
//! the confirm it stands for was lost in the failover, as an asynchronous replica loses it.
//! Entries carry their lineage only on a Cluster; elsewhere nothing here runs.

use std::collections::HashMap;

use sqlx::PgConnection;

use super::entries::{self, PipelineWrite};
use super::recovery;
use super::PgLedger;
use crate::domain::Order;

/// A stream id, `ms-seq`, as two numbers (ordered as Redis orders them).
pub type StreamPos = (u64, u64);

/// Parses a stream id `ms-seq`.
pub fn stream_pos(id: &str) -> Option<StreamPos> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Where a stream entry was read: the replication lineage of the node that wrote it (the
/// campaign's `checked` field there) and its id in the campaign's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub lineage: String,
    pub pos: StreamPos,
}

/// What a check read on the node now serving a campaign (`lineage.lua`).
#[derive(Debug, Clone)]
pub struct NodeRead {
    /// The node's replication id.
    pub lineage: String,
    /// The lineage the campaign was last checked on, as the node has it ('' = never).
    pub checked: String,
    /// The highest order number the node issued.
    pub seq: u64,
    /// The last id of the campaign's stream on the node.
    pub last: StreamPos,
    /// Orders pending on the node.
    pub pending: Vec<String>,
}

/// What the ledger answered a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The ledger's highest order number of the campaign.
    pub seq: u64,
    /// Orders pending on the node that the ledger holds resolved.
    pub resolved: Vec<String>,
}

impl Verdict {
    /// The node may serve the campaign: not behind, nothing it holds pending resolved.
    pub fn settled(&self, node: &NodeRead) -> bool {
        node.seq >= self.seq && self.resolved.is_empty()
    }
}

/// A check's record of the lineages a campaign left, written but not committed: it holds the
/// campaign's row lock until [`Recorded::commit`] (dropped: rolled back). The caller commits
/// only once it has read that the node still serves the lineage the check read: a check whose
/// read went stale while it waited for the lock (the node replaced meanwhile, and a check of
/// the new node recorded first) would otherwise mark the lineage now serving as left, and every
/// later entry of it would be refused. Any check recording after this one waits for the lock,
/// so it sees this record.
pub struct Recorded(sqlx::Transaction<'static, sqlx::Postgres>);

impl Recorded {
    pub async fn commit(self) -> anyhow::Result<()> {
        Ok(self.0.commit().await?)
    }
}

impl PgLedger {
    /// Compares a campaign as `node` holds it with the ledger, once every pipeline transaction
    /// already writing the campaign has ended; when the node may serve it, records in the same
    /// transaction the lineages it left (module docs) and returns that transaction open.
    pub async fn check_lineage(
        &self,
        campaign: &str,
        node: &NodeRead,
    ) -> anyhow::Result<(Verdict, Option<Recorded>)> {
        let mut tx = self.pool.begin().await?;
        // The pipeline takes this row lock before it writes (`apply_read`): a transaction
        // already writing the campaign ends first, a later one reads what is recorded here.
        sqlx::query("SELECT 1 FROM campaigns WHERE id = $1 FOR NO KEY UPDATE")
            .bind(campaign)
            .execute(&mut *tx)
            .await?;
        // Transitions written outside the pipeline (an admin cancel) lock the order alone.
        if !node.pending.is_empty() {
            sqlx::query("SELECT 1 FROM orders WHERE order_id = ANY($1) FOR SHARE")
                .bind(&node.pending)
                .execute(&mut *tx)
                .await?;
        }
        let verdict = Verdict {
            seq: recovery::max_seq(&mut tx, campaign).await?,
            resolved: recovery::resolved_among(&mut tx, &node.pending).await?,
        };
        if verdict.settled(node) {
            record(&mut tx, campaign, node).await?;
            return Ok((verdict, Some(Recorded(tx))));
        }
        tx.commit().await?;
        Ok((verdict, None))
    }
}

/// Records that `node`'s lineage serves `campaign`, and that every other lineage it was served
/// from — the ones recorded, and the one the node names as checked — ends at the node's last
/// stream id at the latest: a bound is only ever lowered. (A→B→C with C behind B: C lacks
/// A's entries between C's last id and B's, so A's bound comes down to C's.)
async fn record(conn: &mut PgConnection, campaign: &str, node: &NodeRead) -> anyhow::Result<()> {
    let (ms, seq) = (node.last.0 as i64, node.last.1 as i64);
    sqlx::query(
        "UPDATE campaign_lineages SET left_ms = $3, left_seq = $4 \
         WHERE campaign_id = $1 AND lineage <> $2 \
           AND (left_ms IS NULL OR (left_ms, left_seq) > ($3, $4))",
    )
    .bind(campaign)
    .bind(&node.lineage)
    .bind(ms)
    .bind(seq)
    .execute(&mut *conn)
    .await?;
    if !node.checked.is_empty() && node.checked != node.lineage {
        sqlx::query(
            "INSERT INTO campaign_lineages (campaign_id, lineage, left_ms, left_seq) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (campaign_id, lineage) DO UPDATE \
             SET left_ms = $3, left_seq = $4 \
             WHERE campaign_lineages.left_ms IS NULL \
                OR (campaign_lineages.left_ms, campaign_lineages.left_seq) > ($3, $4)",
        )
        .bind(campaign)
        .bind(&node.checked)
        .bind(ms)
        .bind(seq)
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query(
        "INSERT INTO campaign_lineages (campaign_id, lineage) VALUES ($1, $2) \
         ON CONFLICT DO NOTHING",
    )
    .bind(campaign)
    .bind(&node.lineage)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The indices of `writes` (beside their `origins`) read from a lineage their campaign has
/// left, above the bound it left at: all of them (none is in the stream of the node serving
/// the campaign, so none may be acknowledged there), and those the ledger does not hold
/// already (they must not be written). Runs in the pipeline's transaction, after its campaign
/// row locks.
pub(super) async fn lost(
    conn: &mut PgConnection,
    writes: &[PipelineWrite],
    origins: &[Option<Origin>],
) -> anyhow::Result<(Vec<usize>, Vec<usize>)> {
    let mut campaigns: Vec<&str> = writes
        .iter()
        .zip(origins)
        .filter(|(_, o)| o.is_some())
        .map(|(w, _)| w.order().campaign_id.as_str())
        .collect();
    if campaigns.is_empty() {
        return Ok(Default::default());
    }
    campaigns.sort_unstable();
    campaigns.dedup();
    let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT campaign_id, lineage, left_ms, left_seq FROM campaign_lineages \
         WHERE campaign_id = ANY($1) AND left_ms IS NOT NULL",
    )
    .bind(&campaigns)
    .fetch_all(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(Default::default());
    }
    let left: HashMap<(String, String), StreamPos> = rows
        .into_iter()
        .map(|(c, l, ms, seq)| ((c, l), (ms as u64, seq as u64)))
        .collect();
    let above: Vec<usize> = writes
        .iter()
        .zip(origins)
        .enumerate()
        .filter_map(|(i, (w, o))| {
            let o = o.as_ref()?;
            let key = (w.order().campaign_id.clone(), o.lineage.clone());
            (o.pos > *left.get(&key)?).then_some(i)
        })
        .collect();
    if above.is_empty() {
        return Ok(Default::default());
    }
    let ids: Vec<&str> = above
        .iter()
        .map(|&i| writes[i].order().order_id.as_str())
        .collect();
    let held = entries::orders_by_id(conn, &ids).await?;
    let refused = above
        .iter()
        .copied()
        .filter(|&i| !already(&writes[i], held.get(&writes[i].order().order_id)))
        .collect();
    Ok((above, refused))
}

/// Whether the ledger's row `held` is what `write` asks for already: it was written before the
/// check (a redelivery), and refusing it now would record a loss that did not happen.
fn already(write: &PipelineWrite, held: Option<&Order>) -> bool {
    let Some(h) = held else { return false };
    let same = entries::same_order(h, write.order());
    match write {
        PipelineWrite::Order(_) => same,
        PipelineWrite::Transition(t) => same && h.state == t.to,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_order_as_redis_orders_them() {
        assert_eq!(stream_pos("1700000000000-3"), Some((1_700_000_000_000, 3)));
        assert!(stream_pos("9-0") < stream_pos("10-0"));
        assert!(stream_pos("10-2") < stream_pos("10-10"));
        for bad in ["", "1", "a-1", "1-", "-1", "1-2-3"] {
            assert_eq!(stream_pos(bad), None, "{bad}");
        }
    }
}
