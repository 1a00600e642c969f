//! The claim path of the embedded engine: the atomic step under the campaign lock, the order
//! and idempotency answer handed to the group commit in the same critical section, and the
//! commit callback that makes the decision final or undoes it.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::cell::{CampaignCell, Inner};
use super::Embedded;
use crate::domain::{ClaimAnswer, ClaimRequest, Error, IdempotencyKey, Kind, Order};
use crate::engine::idempotency::{self, commit_failed, Slot};
use crate::engine::state::{Decision, Reservation};
use crate::ledger::{CommitError, CommitFault, IdemRecord, LedgerWrite};

impl Embedded {
    pub(super) async fn decide_and_commit(
        &self,
        id: &str,
        req: ClaimRequest,
        key: Option<IdempotencyKey>,
    ) -> Result<ClaimAnswer, Error> {
        let cell = self.cell(id)?;
        let mut now = self.clock.now();
        let mut loaded = false;
        let rx = loop {
            let decided = self.decide_locked(&cell, id, &req, key.as_ref(), now)?;
            match decided {
                Step::Answered(answer) => return Ok(answer),
                Step::Wait(rx) => break rx,
                // The campaign was left dormant at start and this claim needs its buyers.
                Step::Dormant if !loaded => {
                    let _admin = cell.admin.lock().await;
                    self.awake(&cell).await?;
                    loaded = true;
                    now = self.clock.now();
                }
                Step::Dormant => {
                    return Err(Error::not_committed(
                        "the campaign is being loaded from the ledger",
                    ))
                }
            }
        };
        idempotency::wait(rx).await
    }

    /// The atomic step under the campaign lock, its order and answer handed to the commit.
    fn decide_locked(
        &self,
        cell: &Arc<CampaignCell>,
        id: &str,
        req: &ClaimRequest,
        key: Option<&IdempotencyKey>,
        now: DateTime<Utc>,
    ) -> Result<Step, Error> {
        let rx = 'decide: {
            let mut inner = cell.inner.lock();
            if cell.epoch != self.commit.epoch() {
                // A commit failed with an unknown outcome: this state is being replaced by the
                // ledger's, and even a rejection decided on it could be wrong.
                return Err(Error::not_committed(
                    "the engine is re-reading its state from the ledger",
                ));
            }
            if let Some(k) = &key {
                match inner.idem.get(&req.user_id, k.as_str()) {
                    Some(Slot::Done(answer, _)) => return Ok(Step::Answered(answer.clone())),
                    // Someone is already processing this key: wait for their answer.
                    Some(Slot::Pending(rx, _)) => break 'decide rx.clone(),
                    None => {}
                }
            }
            let kind = inner.state.def.kind;
            let (answer, reservation) = match inner.state.decide(&req.user_id, req.qty, now) {
                Decision::Dormant => return Ok(Step::Dormant),
                Decision::Rejected(answer) => (answer, None),
                Decision::Won(r) => {
                    // Holder first, then the stock its win left (see guard::soldout).
                    cell.signal.add_holder(&r.user_id);
                    cell.publish(&inner);
                    (r.answer(kind), Some(r))
                }
            };
            // A rejection changed nothing: beyond the idempotency bound it is answered but not
            // kept (see engine::idempotency).
            if reservation.is_none()
                && (key.is_none() || !inner.idem.may_keep_rejection(&req.user_id))
            {
                return Ok(Step::Answered(answer));
            }
            let mut writes = Vec::with_capacity(2);
            if let Some(r) = &reservation {
                writes.push(LedgerWrite::Order(Order {
                    order_id: r.order_id.clone(),
                    campaign_id: id.to_owned(),
                    user_id: r.user_id.clone(),
                    qty: r.qty,
                    codes: (kind == Kind::Codes).then(|| r.codes.clone()),
                    state: r.state(),
                    created_at: r.created_at,
                    cancelled_at: None,
                    pay_by: r.pay_by,
                    resolved_at: None,
                }));
            }
            let (tx, rx) = watch::channel(None);
            let idem = key.map(|k| (req.user_id.clone(), k.as_str().to_owned()));
            if let Some((user, k)) = &idem {
                writes.push(LedgerWrite::Idem(IdemRecord {
                    campaign_id: id.to_owned(),
                    user_id: user.clone(),
                    key: k.clone(),
                    answer: answer.clone(),
                    created_at: now,
                }));
                inner.idem.insert(
                    user.clone(),
                    k.clone(),
                    Slot::Pending(rx.clone(), reservation.is_none()),
                );
            }
            let on_commit = {
                let cell = cell.clone();
                let reservation = reservation.clone();
                let idem = idem.clone();
                let answer = answer.clone();
                move |result: Result<(), CommitError>| {
                    let mut inner = cell.inner.lock();
                    settle(
                        &cell,
                        &mut inner,
                        result.as_ref().err(),
                        reservation.as_ref(),
                        idem,
                        &answer,
                        now,
                    );
                    let _ = tx.send(Some(result.map(|()| answer)));
                }
            };
            if let Err(e) = self.commit.submit(cell.epoch, writes, on_commit) {
                settle(
                    cell,
                    &mut inner,
                    Some(&e),
                    reservation.as_ref(),
                    idem,
                    &answer,
                    now,
                );
                return Err(commit_failed(e));
            }
            rx
        };
        Ok(Step::Wait(rx))
    }
}

/// What [`Embedded::decide_locked`] came to.
enum Step {
    Answered(ClaimAnswer),
    /// Handed to the commit (or another request's): its answer comes on this channel.
    Wait(watch::Receiver<idempotency::Settled>),
    Dormant,
}

/// Makes a decision final (commit succeeded) or undoes it (nothing was written). After an
/// unknown or contradicted commit it touches nothing: this state is about to be replaced by
/// the one re-read from the ledger, which alone knows whether the order exists.
fn settle(
    cell: &CampaignCell,
    inner: &mut Inner,
    failed: Option<&CommitError>,
    reservation: Option<&Reservation>,
    idem: Option<(String, String)>,
    answer: &ClaimAnswer,
    at: chrono::DateTime<Utc>,
) {
    let Some(failed) = failed else {
        if let Some((user, key)) = idem {
            inner.idem.insert(user, key, Slot::Done(answer.clone(), at));
        }
        return;
    };
    if failed.fault != CommitFault::NotCommitted {
        return;
    }
    if let Some(r) = reservation {
        inner.state.undo(r);
        cell.publish(inner);
    }
    if let Some((user, key)) = idem {
        inner.idem.remove(&user, &key);
    }
}
