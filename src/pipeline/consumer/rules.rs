//! Orders the ledger refuses for a guarantee (`ledger::invariants`): a campaign's live units
//! above its total, a buyer above the limit, a code held twice, a second resolution.
//!
//! The gate answered `won` for such an order, and the ledger will not take it: the gate and
//! the ledger disagree, as with a reissued order id. The buyer's answer is recorded in
//! `failed_orders`, one error line is logged, the campaign is fenced (its claims answer 503
//! "nothing was changed") and rebuilt from the ledger once its stream is drained. No units go
//! back in Redis: the rebuild gives the gate the ledger's count.
//!
//! One refusal is not yet a contradiction: reclaimed entries arrive after later ones (a
//! consumer crashed holding them), and in a campaign with holds an expiry frees the unit a
//! later order took. So an order the ledger refuses while an older entry of its campaign's
//! stream is still unhandled is deferred: it stays unacknowledged and is tried again after
//! the older one. Only a refusal with nothing older left (tried once more, as what was older
//! may have committed after the refusal), or one deferred for twice the longest a dead
//! consumer's entries take to be reclaimed (an older entry that never gets handled must not
//! hold the campaign for ever), is recorded.

use std::collections::HashSet;
use std::time::Instant;

use super::Consumer;
use crate::engine::scale_out::Keys;
use crate::ledger::PipelineWrite;
use crate::pipeline::entry::Entry;

/// Stream entries as (campaign, stream id).
pub(super) type Handled = HashSet<(String, String)>;

impl Consumer {
    /// Whether every entry of `entry`'s campaign stream older than it is in `handled`
    /// (handled earlier in this pass; entries handled before are no longer in the stream).
    pub(super) async fn nothing_older(
        &mut self,
        entry: &Entry,
        handled: &Handled,
    ) -> anyhow::Result<bool> {
        let mine = handled
            .iter()
            .filter(|(c, _)| *c == entry.campaign_id)
            .count();
        let older: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(Keys::new(&entry.campaign_id).orders())
            .arg("-")
            .arg(format!("({}", entry.stream_id))
            .arg("COUNT")
            .arg(mine + 1)
            .query_async(&mut self.conn)
            .await?;
        Ok(older
            .ids
            .iter()
            .all(|s| handled.contains(&(entry.campaign_id.clone(), s.id.clone()))))
    }

    /// Whether `entry` has been deferred for longer than an older entry held by a dead
    /// consumer can take to be handled, twice over: idle for `reclaim_after`, the reclaim
    /// lease of a dead holder expired, taken and used by another (its clock starts now if it
    /// was not deferred before).
    pub(super) fn deferred_too_long(&mut self, entry: &Entry) -> bool {
        let key = (entry.campaign_id.clone(), entry.stream_id.clone());
        let since = *self.deferred_since.entry(key).or_insert_with(Instant::now);
        let worst = self.opts.reclaim_after + self.reclaim_ttl() + self.reclaim_every() * 2;
        since.elapsed() > worst * 2
    }

    /// Records an order the ledger refused for `rule` and fences its campaign.
    pub(super) async fn refused_by_rule(
        &mut self,
        entry: &Entry,
        write: &PipelineWrite,
        rule: &str,
        why: &anyhow::Error,
    ) -> anyhow::Result<()> {
        let order = write.order();
        let reason = format!(
            "{}{rule}): the gate and the ledger disagree: {why:#}",
            super::LEDGER_RULE
        );
        self.fence_and_record(entry, &order.order_id, reason, "ledger_rule")
            .await?;
        tracing::error!(
            campaign = %entry.campaign_id,
            order = %order.order_id,
            user = %order.user_id,
            rule,
            "the ledger refused an order the gate answered won: recorded in failed_orders; \
             the campaign is fenced and rebuilt from the ledger"
        );
        Ok(())
    }
}
