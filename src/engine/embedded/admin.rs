//! Admin operations of the embedded engine. Each takes the campaign's admin mutex, so they
//! never interleave. Pause and close apply under the claim lock before they are persisted (no
//! claim decided afterwards wins); restock and resume apply only once durable (nothing sells
//! before the change that allows it is on disk).
//!
//! Every operation that changes state runs detached from its request (`engine::detach`):
//! its own task holds the admin mutex, waits for the commit and applies the in-memory change,
//! and the request only awaits that task. A client that disconnects (hyper then drops the
//! request future) can therefore never leave the ledger changed and the engine not, nor release
//! the admin mutex half-way through an operation.

use super::cell::CampaignCell;
use super::Embedded;
use crate::domain::{
    now, AdminKey, CampaignLimits, CampaignView, Error, NewCampaign, Restock, Status, Supply,
};
use crate::engine::detach::detached;
use crate::engine::idempotency::commit_failed;
use crate::engine::state::{CampaignDef, CampaignState};
use crate::ledger::{CommitError, CommitFault, LedgerWrite};

impl Embedded {
    pub(super) async fn create(
        &self,
        c: NewCampaign,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        detached(
            &self.me,
            move |me| async move { me.create_now(c, key).await },
        )
        .await
    }

    pub(super) async fn add_stock(
        &self,
        id: &str,
        restock: Restock,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let id = id.to_owned();
        detached(&self.me, move |me| async move {
            me.add_stock_now(&id, restock, key).await
        })
        .await
    }

    pub(super) async fn change_status(
        &self,
        id: &str,
        to: Status,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let id = id.to_owned();
        detached(&self.me, move |me| async move {
            me.change_status_now(&id, to, key).await
        })
        .await
    }

    /// Whether `key` was already used: `true` for this very request (the caller answers the
    /// current state and changes nothing), a conflict for another request. Call under the
    /// lock that serialises the operation, so the first use's commit is visible.
    async fn replayed(&self, key: Option<&AdminKey>) -> Result<bool, Error> {
        let Some(key) = key else { return Ok(false) };
        let remembered = self
            .ledger
            .admin_key(key)
            .await
            .map_err(|e| Error::unavailable("reading the Idempotency-Key failed", e))?;
        match remembered {
            None => Ok(false),
            Some((op, fingerprint)) => key.check_replay(&op, &fingerprint).map(|()| true),
        }
    }

    /// The writes of an operation, plus its Idempotency-Key when it has one.
    fn with_key(mut writes: Vec<LedgerWrite>, key: Option<AdminKey>) -> Vec<LedgerWrite> {
        if let Some(key) = key {
            writes.push(LedgerWrite::AdminKey { key, at: now() });
        }
        writes
    }

    pub(super) async fn store_limits(
        &self,
        id: &str,
        limits: CampaignLimits,
    ) -> Result<CampaignLimits, Error> {
        let id = id.to_owned();
        detached(&self.me, move |me| async move {
            me.store_limits_now(&id, limits).await
        })
        .await
    }

    async fn create_now(
        &self,
        c: NewCampaign,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let _one_at_a_time = self.create.lock().await;
        // Validated here, under the create lock, so a duplicate never reaches the ledger as a
        // failing INSERT that would fail the claims sharing its group commit.
        if self.replayed(key.as_ref()).await? {
            return Ok(self.cell(&c.id)?.view());
        }
        if self.campaigns.read().contains_key(&c.id) {
            return Err(Error::Conflict(format!(
                "campaign '{}' already exists",
                c.id
            )));
        }
        let def = CampaignDef {
            id: c.id.clone(),
            kind: c.kind(),
            per_user_limit: c.per_user_limit,
            starts_at: c.starts_at,
            ends_at: c.ends_at,
            hold_seconds: c.hold_seconds,
            waiting_room: c.waiting_room,
        };
        let epoch = self.commit.epoch();
        let total = c.total();
        let codes = match c.supply {
            Supply::Stock(_) => Vec::new(),
            Supply::Codes(codes) => codes,
        };
        let writes = vec![LedgerWrite::CreateCampaign {
            def: def.clone(),
            total,
            codes: codes.clone(),
            status: Status::Active,
            at: now(),
        }];
        self.commit
            .run(epoch, Self::with_key(writes, key))
            .await
            .map_err(commit_failed)?;
        let cell = CampaignCell::new(
            CampaignState::new(def, total, codes, Status::Active),
            &self.board,
            epoch,
            self.idem_limits,
        );
        let view = cell.view();
        self.campaigns.write().insert(c.id, cell);
        tracing::info!(campaign = %view.id, kind = view.kind.as_str(), total, "campaign created");
        Ok(view)
    }

    async fn add_stock_now(
        &self,
        id: &str,
        restock: Restock,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let cell = self.cell(id)?;
        let _admin = cell.admin.lock().await;
        if self.replayed(key.as_ref()).await? {
            return Ok(cell.view());
        }
        {
            let inner = cell.inner.lock();
            restock.check_against(inner.state.def.kind, inner.state.total)?;
        }
        if let Restock::Codes(_) = restock {
            // New codes are checked against every code it had (units need no buyer: a
            // dormant campaign cannot sell them, and loading it later reads the new total).
            self.awake(&cell).await?;
        }
        {
            let inner = cell.inner.lock();
            if let Restock::Codes(codes) = &restock {
                if let Some(dup) = inner.state.known_code(codes) {
                    return Err(Error::Conflict(format!(
                        "campaign '{id}' already has code {dup:?}"
                    )));
                }
            }
        }
        // Persist first, then make the units available: a unit is never sold before the
        // restock that created it is durable.
        let (units, codes) = match &restock {
            Restock::Units(n) => (*n, Vec::new()),
            Restock::Codes(c) => (c.len() as u64, c.clone()),
        };
        let writes = vec![LedgerWrite::Restock {
            campaign_id: id.to_owned(),
            units,
            codes,
            at: now(),
        }];
        self.commit
            .run(cell.epoch, Self::with_key(writes, key))
            .await
            .map_err(commit_failed)?;
        let mut inner = cell.inner.lock();
        match restock {
            Restock::Units(n) => inner.state.add_units(n),
            Restock::Codes(c) => inner.state.add_codes(c),
        }
        cell.publish(&inner);
        tracing::info!(
            campaign = id,
            units,
            total = inner.state.total,
            "campaign restocked"
        );
        Ok(inner.state.view())
    }

    async fn change_status_now(
        &self,
        id: &str,
        to: Status,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let cell = self.cell(id)?;
        let _admin = cell.admin.lock().await;
        if self.replayed(key.as_ref()).await? {
            return Ok(cell.view());
        }
        if to == Status::Active {
            // A resumed campaign may sell again (unless its window ended): its buyers first,
            // once the change is known to be allowed.
            let current = cell.inner.lock().state.status;
            current.transition(to)?;
            self.awake(&cell).await?;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let previous = {
            let mut inner = cell.inner.lock();
            let previous = inner.state.status;
            previous.transition(to)?;
            // Stopping takes effect at once, under the claim lock: no claim decided after this
            // point can win. Resuming takes effect only once it is durable.
            if to != Status::Active {
                inner.state.status = to;
                cell.publish(&inner);
            }
            let write = LedgerWrite::Status {
                campaign_id: id.to_owned(),
                status: to,
                at: now(),
            };
            self.commit
                .submit(cell.epoch, Self::with_key(vec![write], key), move |r| {
                    let _ = tx.send(r);
                })
                .inspect_err(|_| {
                    inner.state.status = previous;
                    cell.publish(&inner);
                })
                .map_err(commit_failed)?;
            previous
        };
        let committed = rx.await.unwrap_or_else(|_| {
            Err(CommitError {
                fault: CommitFault::NotCommitted,
                reason: "the ledger writer has stopped".into(),
            })
        });
        let mut inner = cell.inner.lock();
        match committed {
            Ok(()) => {
                inner.state.status = to;
                cell.publish(&inner);
                tracing::info!(
                    campaign = id,
                    from = previous.as_str(),
                    to = to.as_str(),
                    "status changed"
                );
                Ok(inner.state.view())
            }
            Err(e) => {
                inner.state.status = previous;
                cell.publish(&inner);
                Err(commit_failed(e))
            }
        }
    }

    async fn store_limits_now(
        &self,
        id: &str,
        limits: CampaignLimits,
    ) -> Result<CampaignLimits, Error> {
        let cell = self.cell(id)?;
        let _admin = cell.admin.lock().await;
        self.commit
            .run(
                cell.epoch,
                vec![LedgerWrite::Limits {
                    campaign_id: id.to_owned(),
                    limits,
                    at: now(),
                }],
            )
            .await
            .map_err(commit_failed)?;
        tracing::info!(campaign = id, limits = %serde_json::json!(limits), "rate limits set");
        Ok(limits)
    }
}
