//! Confirms of pending orders, decided and committed in batches per campaign.
//!
//! A confirm must be durable before its answer, and a resolution holds the campaign's admin
//! mutex until its write is durable and settled (so a second confirm, a cancel or the sweeper
//! never sees one half done). One confirm per commit would make a campaign's confirm rate the
//! inverse of an fsync — a few hundred a second — exactly when a sale's payment callbacks
//! arrive in a burst. So confirms queue on their campaign's [`CampaignCell`] and whoever takes the
//! admin mutex next decides *every* queued confirm under one campaign lock and writes them in
//! one group commit; the others find their answer waiting when their turn comes (tokio's
//! mutex is fair, so nobody waits behind more than one batch it is not part of).
//!
//! Each confirm in a batch is decided exactly as alone: at the clock reading taken under the
//! campaign lock, pending and before `pay_by` → confirmed; at or after `pay_by` → the order is
//! expired on the spot and the answer is 409; not pending → the ledger's state decides the
//! answer. The same order twice in one batch gets the first one's answer.

use std::collections::HashMap;

use tokio::sync::oneshot;

use super::cell::{CampaignCell, QueuedConfirm};
use super::Embedded;
use crate::domain::{Error, Order, OrderState};
use crate::engine::backend::Backend;
use crate::engine::hold_stats::{being_resolved, no_holds, not_confirmable, overdue};
use crate::engine::idempotency::commit_failed;
use crate::engine::state::{Held, NotConfirmable};
use crate::ledger::{CommitFault, LedgerWrite};

/// How one confirm of a batch was decided under the campaign lock.
enum Decided {
    Taken(Held),
    Overdue,
    NotPending,
    /// The same order earlier in this batch.
    Repeat,
}

impl Embedded {
    pub(super) async fn confirm_order_now(&self, order_id: &str) -> Result<Order, Error> {
        let (cell, seq) = self.order_cell(order_id)?;
        let (reply, mut answer) = oneshot::channel();
        cell.confirms.lock().push(QueuedConfirm {
            order_id: order_id.to_owned(),
            seq,
            reply,
        });
        let _admin = cell.admin.lock().await;
        if let Ok(decided) = answer.try_recv() {
            return decided;
        }
        let batch = std::mem::take(&mut *cell.confirms.lock());
        self.confirm_batch(&cell, batch).await;
        answer.try_recv().unwrap_or_else(|_| {
            Err(Error::not_committed(
                "the confirm was not decided; nothing was changed, retry",
            ))
        })
    }

    /// Decides and commits a batch of confirms; call with the campaign's admin mutex held.
    async fn confirm_batch(&self, cell: &CampaignCell, batch: Vec<QueuedConfirm>) {
        let now = self.clock.now();
        let decided: Result<Vec<Decided>, Error> = {
            let mut inner = cell.inner.lock();
            self.current(cell).map(|()| {
                let mut seen = HashMap::with_capacity(batch.len());
                batch
                    .iter()
                    .map(|q| {
                        if seen.insert(q.seq, ()).is_some() {
                            return Decided::Repeat;
                        }
                        match inner.state.holds.take_for_confirm(q.seq, now) {
                            Ok(held) => Decided::Taken(held),
                            Err(NotConfirmable::Overdue) => Decided::Overdue,
                            Err(NotConfirmable::NotPending) => Decided::NotPending,
                        }
                    })
                    .collect()
            })
        };
        let decided = match decided {
            Ok(d) => d,
            Err(e) => {
                for q in batch {
                    let _ = q.reply.send(Err(e.clone()));
                }
                return;
            }
        };
        let committed = self.commit_confirms(cell, &batch, &decided, now).await;
        if decided.iter().any(|d| matches!(d, Decided::Overdue)) {
            if let Err(e) = self.expire_locked(cell).await {
                tracing::debug!(error = %e, "expiring overdue orders at confirm failed");
            }
        }
        let mut first: HashMap<u64, Result<Order, Error>> = HashMap::new();
        for (q, d) in batch.into_iter().zip(decided) {
            let answer = match d {
                Decided::Repeat => first
                    .get(&q.seq)
                    .cloned()
                    .unwrap_or_else(|| Err(Error::not_committed("confirm repeated"))),
                Decided::Taken(_) => match &committed {
                    Ok(()) => self.order(&q.order_id).await,
                    Err(e) => Err(e.clone()),
                },
                Decided::Overdue => self.order(&q.order_id).await.and_then(|o| Err(overdue(&o))),
                Decided::NotPending => self.resolved_answer(&q.order_id).await,
            };
            first.entry(q.seq).or_insert_with(|| answer.clone());
            let _ = q.reply.send(answer);
        }
    }

    /// Writes the taken confirms in one group commit and settles them; on a write that did
    /// not commit, the orders go back to pending.
    async fn commit_confirms(
        &self,
        cell: &CampaignCell,
        batch: &[QueuedConfirm],
        decided: &[Decided],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), Error> {
        let writes: Vec<LedgerWrite> = batch
            .iter()
            .zip(decided)
            .filter(|(_, d)| matches!(d, Decided::Taken(_)))
            .map(|(q, _)| LedgerWrite::Confirm {
                order_id: q.order_id.clone(),
                at: now,
            })
            .collect();
        if writes.is_empty() {
            return Ok(());
        }
        let n = writes.len();
        let taken = batch.iter().zip(decided).filter_map(|(q, d)| match d {
            Decided::Taken(held) => Some((q.seq, held)),
            _ => None,
        });
        if let Err(e) = self.commit.run(cell.epoch, writes).await {
            if e.fault == CommitFault::NotCommitted {
                let mut inner = cell.inner.lock();
                for (seq, held) in taken {
                    inner.state.holds.put_back(seq, held.clone());
                }
            }
            return Err(commit_failed(e));
        }
        let mut inner = cell.inner.lock();
        for (_, held) in taken {
            inner.state.holds.settled(held.qty);
        }
        drop(inner);
        self.hold_stats.confirmed_many(n as u64);
        tracing::debug!(confirmed = n, "orders confirmed");
        Ok(())
    }

    /// The answer to a confirm of an order that is not pending here: its ledger state decides.
    async fn resolved_answer(&self, order_id: &str) -> Result<Order, Error> {
        let order = self.order(order_id).await?;
        match order.state {
            OrderState::Confirmed => Ok(order),
            OrderState::Expired | OrderState::Cancelled => Err(not_confirmable(&order)),
            OrderState::Active => Err(no_holds(order_id)),
            OrderState::Pending => Err(being_resolved(order_id)),
        }
    }
}
