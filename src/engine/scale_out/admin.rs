//! Admin operations of the scale-out deployment and the reconciliation of the gate with the
//! ledger.
//!
//! Order of writes, chosen so a crash between the two stores is always repairable:
//! - create and restock commit to PostgreSQL first, then a guarded script applies them to
//!   Redis (`install.lua` only if the campaign is absent, `restock.lua` only if the gate's
//!   total is still the pre-restock total). A gate behind the ledger under-sells for a moment;
//!   it can never sell a unit the ledger does not have.
//! - pause / resume / close commit to PostgreSQL first (under the campaign's row lock), then
//!   set the gate to the status the ledger holds *now* (`sync_status`), so concurrent changes
//!   through several instances converge on the last one committed. A crash between the two
//!   leaves the gate behind, and `reconcile` compares the status too.
//! - with an Idempotency-Key, the key is written in the transaction of the change; a retry
//!   finds it, adds nothing, brings the gate level and answers the current state.
//! - a change the ledger committed but Redis did not take answers 503 saying so (never
//!   "nothing was changed"); `catch_up.rs` reconciles the campaign as soon as Redis answers
//!   (or the next admin change, a restart, a retry with the same key does).
//! - cancel: see `cancel.rs`.

use super::scripts::Guarded;
use super::{redis_failed, ScaleOut};
use crate::domain::{now, AdminKey, CampaignView, Error, NewCampaign, Restock, Status, Supply};
use crate::engine::state::{CampaignDef, CampaignState, Rebuild};
use crate::ledger::{admin_keys, PgLedger};

/// A change the ledger committed but Redis did not take: a 503 that says so, since a retry
/// without the same Idempotency-Key would repeat it.
pub(super) fn saved_not_applied<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> Error {
    move |e| {
        tracing::error!(error = %e, "{what} is committed to the ledger but Redis did not take it");
        Error::Unavailable(format!(
            "{what} is saved in the ledger but not yet applied to the gate; it will be \
             applied as soon as Redis answers again: check the campaign before retrying, \
             or retry with the same Idempotency-Key"
        ))
    }
}

/// Rebuilds a campaign missing from Redis from the ledger (no-op if Redis has it). Unknown →
/// 404. Used by the engine and by the pipeline after it fenced a campaign.
pub async fn rebuild_from_ledger(
    conn: &mut super::RedisConn,
    ledger: &PgLedger,
    scripts: &super::Scripts,
    id: &str,
) -> Result<(), Error> {
    let failed = "rebuilding the campaign from the ledger failed";
    let (stored, released) = ledger
        .stored_snapshot(id)
        .await
        .map_err(ledger_failed(failed))?
        .ok_or_else(|| Error::campaign_not_found(id))?;
    let state = gate_state(&stored);
    if state.def.hold_seconds.is_some() {
        // Before the install: a campaign with holds is never in Redis unknown to the sweepers.
        redis::AsyncCommands::sadd::<_, _, ()>(conn, super::keys::HOLDS_SET, id)
            .await
            .map_err(redis_failed(failed))?;
    }
    let installed = scripts
        .install(conn, &state, stored.max_seq, &released)
        .await
        .map_err(redis_failed(failed))?;
    if installed {
        tracing::warn!(
            campaign = id,
            remaining = state.remaining,
            "campaign rebuilt in Redis from the ledger"
        );
    }
    Ok(())
}

pub(super) fn ledger_failed(context: &'static str) -> impl Fn(anyhow::Error) -> Error {
    move |e| Error::unavailable(context, format!("{e:#}"))
}

impl ScaleOut {
    pub(super) async fn create(
        &self,
        c: NewCampaign,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        if let Some(k) = &key {
            if let Some((op, fingerprint)) = self.ledger.admin_key(k).await? {
                k.check_replay(&op, &fingerprint)?;
                return self.committed_view(&c.id, "the campaign").await;
            }
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
        let total = c.total();
        let codes = match c.supply {
            Supply::Stock(_) => Vec::new(),
            Supply::Codes(codes) => codes,
        };
        let created = self
            .ledger
            .create_campaign_keyed(&def, total, &codes, now(), key.as_ref())
            .await;
        if let (Err(Error::Conflict(_)), Some(k)) = (&created, &key) {
            // Another instance may have processed this very create concurrently.
            if let Some((op, fingerprint)) = self.ledger.admin_key(k).await? {
                k.check_replay(&op, &fingerprint)?;
                return self.committed_view(&def.id, "the campaign").await;
            }
        }
        created?;
        if def.hold_seconds.is_some() {
            self.note_holds(&def.id)
                .await
                .map_err(saved_not_applied("the campaign"))?;
        }
        let state = CampaignState::new(def, total, codes, Status::Active);
        let installed = self
            .scripts
            .install(&mut self.conn(), &state, 0, &[])
            .await
            .map_err(saved_not_applied("the campaign"))?;
        if !installed {
            // Redis already had a campaign of that id the ledger did not: state left over from
            // another ledger. The gate's state wins; say so loudly.
            tracing::error!(campaign = %state.def.id, "Redis already holds this campaign although the ledger did not; flush stale Redis data");
            return self.committed_view(&state.def.id, "the campaign").await;
        }
        if self.redis.is_cluster() {
            // Checked on its node's lineage now, while no order of it can exist anywhere: left
            // to the first claims, every batch of a fresh campaign's opening storm waits for the
            // one check the first of them started, 5 s at most (lineage.rs). A failure here is
            // harmless: the first claim checks it as before.
            if let Err(e) = self.check_lineage(&state.def.id).await {
                tracing::warn!(campaign = %state.def.id, error = %e, "checking a new campaign on its Cluster node failed; its first claim checks it");
            }
        }
        tracing::info!(campaign = %state.def.id, kind = state.def.kind.as_str(), total, "campaign created");
        Ok(state.view())
    }

    /// Rebuilds a campaign missing from Redis from the ledger. Unknown → 404.
    pub(super) async fn install_from_ledger(&self, id: &str) -> Result<(), Error> {
        rebuild_from_ledger(&mut self.conn(), &self.ledger, &self.scripts, id).await
    }

    /// Brings the gate level with the ledger: installs a missing campaign (unless it is
    /// dormant), applies restocks the ledger committed but Redis never saw, and releases
    /// cancelled orders (idempotent).
    pub async fn reconcile(&self, id: &str) -> Result<(), Error> {
        let Some(gate) = self.gate_view(id).await? else {
            let now = self.dormancy_now_for(id).await?;
            if self.dormant_in_ledger(id, now).await?.is_some() {
                return Ok(()); // answered from the ledger until a change needs it (dormant.rs)
            }
            return self.install_from_ledger(id).await;
        };
        if gate.holds.is_some() {
            // Known to the sweepers even if the set was lost on its own.
            self.note_holds(id)
                .await
                .map_err(redis_failed("registering the campaign's holds failed"))?;
        }
        self.catch_up_restocks(id).await?;
        self.sync_status(id).await?;
        let cancelled = self
            .ledger
            .cancelled_orders(id)
            .await
            .map_err(ledger_failed("reading cancelled orders failed"))?;
        for o in cancelled {
            self.release(&o).await?;
        }
        Ok(())
    }

    async fn catch_up_restocks(&self, id: &str) -> Result<(), Error> {
        loop {
            let Some(gate) = self.gate_view(id).await? else {
                return self.install_from_ledger(id).await;
            };
            let (total, codes) = self
                .ledger
                .total_and_codes_from(id, gate.total)
                .await
                .map_err(ledger_failed("reading the campaign failed"))?;
            if total <= gate.total {
                return Ok(());
            }
            let applied = self
                .scripts
                .restock(&mut self.conn(), id, gate.total, total - gate.total, &codes)
                .await
                .map_err(redis_failed("applying a restock to Redis failed"))?;
            if let Guarded::Ok(_) = applied {
                tracing::warn!(
                    campaign = id,
                    units = total - gate.total,
                    "applied a restock Redis had missed"
                );
                return Ok(());
            }
        }
    }

    pub(super) async fn restock_campaign(
        &self,
        id: &str,
        restock: Restock,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let done = self
            .ledger
            .restock_keyed(id, &restock, now(), key.as_ref())
            .await?;
        if done.replayed {
            // The first attempt's restock is committed; make sure the gate has it too.
            self.catch_up_restocks(id)
                .await
                .map_err(|_| saved_not_applied("the restock")("catching up failed"))?;
            return self.committed_view(id, "the restock").await;
        }
        let codes = match &restock {
            Restock::Units(_) => &[][..],
            Restock::Codes(c) => &c[..],
        };
        let applied = self
            .scripts
            .restock(
                &mut self.conn(),
                id,
                done.before,
                done.after - done.before,
                codes,
            )
            .await
            .map_err(saved_not_applied("the restock"))?;
        if applied != Guarded::Ok(done.after.to_string()) {
            // Another instance restocked concurrently, or Redis lost the campaign.
            self.catch_up_restocks(id)
                .await
                .map_err(|_| saved_not_applied("the restock")("catching up failed"))?;
        }
        tracing::info!(
            campaign = id,
            units = done.after - done.before,
            total = done.after,
            "campaign restocked"
        );
        self.committed_view(id, "the restock").await
    }

    /// The campaign's view after `what` committed: if the gate cannot be read back (Redis
    /// keeps losing the campaign), the answer still says the change is saved, so the
    /// operator's keyed retry replays it instead of wondering whether to send it again.
    async fn committed_view(&self, id: &str, what: &'static str) -> Result<CampaignView, Error> {
        match self.campaign_view(id).await {
            Err(Error::Unavailable(e)) => Err(Error::Unavailable(format!(
                "{what} is saved in the ledger, but the campaign could not be read back ({e}): \
                 check the campaign before retrying, or retry with the same Idempotency-Key"
            ))),
            other => other,
        }
    }

    async fn campaign_view(&self, id: &str) -> Result<CampaignView, Error> {
        crate::engine::backend::Backend::campaign(self, id).await
    }

    pub(super) async fn change_status(
        &self,
        id: &str,
        to: Status,
        key: Option<AdminKey>,
    ) -> Result<CampaignView, Error> {
        let failed = "the status change could not be committed";
        let (mut tx, previous) = self.ledger.lock_campaign(id).await?;
        let replayed = match &key {
            Some(k) => match admin_keys::lookup_pg(&mut tx, k)
                .await
                .map_err(|e| Error::unavailable(failed, e))?
            {
                Some((op, fingerprint)) => {
                    k.check_replay(&op, &fingerprint)?;
                    true
                }
                None => false,
            },
            None => false,
        };
        if !replayed {
            previous.transition(to)?;
            PgLedger::write_status(&mut tx, id, to, now())
                .await
                .map_err(|e| Error::unavailable(failed, e))?;
            if let Some(k) = &key {
                PgLedger::write_admin_key(&mut tx, k, now())
                    .await
                    .map_err(|e| Error::unavailable(failed, e))?;
            }
            tx.commit()
                .await
                .map_err(|e| Error::unavailable(failed, e))?;
        } else {
            drop(tx);
        }
        // Ledger first, gate second: the gate takes whatever status the ledger holds now.
        self.catch_up_restocks(id)
            .await
            .map_err(|_| saved_not_applied("the status change")("catching up failed"))?;
        self.sync_status(id)
            .await
            .map_err(|_| saved_not_applied("the status change")("Redis failed"))?;
        if !replayed {
            tracing::info!(
                campaign = id,
                from = previous.as_str(),
                to = to.as_str(),
                "status changed"
            );
        }
        self.committed_view(id, "the status change").await
    }

    /// Sets the gate's status to the ledger's, until the ledger's is the same before and after
    /// (a change committed meanwhile by another instance is then applied too).
    async fn sync_status(&self, id: &str) -> Result<(), Error> {
        self.sync_status_or_install(id, true).await
    }

    /// [`Self::sync_status`]; a campaign Redis does not have is rebuilt from the ledger if
    /// `install`, else left out (a dormant one is then answered from the ledger, dormant.rs;
    /// any other is rebuilt by the next claim or read).
    pub(super) async fn sync_status_or_install(
        &self,
        id: &str,
        install: bool,
    ) -> Result<(), Error> {
        let read = "reading the campaign's status failed";
        let mut status = self.ledger.status(id).await.map_err(ledger_failed(read))?;
        loop {
            let Some(status_now) = status else {
                return Ok(());
            };
            let switched = self
                .scripts
                .status(&mut self.conn(), id, status_now.as_str(), true)
                .await
                .map_err(redis_failed("Redis did not take the status change"))?;
            if switched == Guarded::Missing {
                return match install {
                    true => self.install_from_ledger(id).await,
                    false => Ok(()),
                };
            }
            let again = self.ledger.status(id).await.map_err(ledger_failed(read))?;
            if again == Some(status_now) {
                return Ok(());
            }
            status = again;
        }
    }
}

/// The campaign's state rebuilt from the ledger's snapshot of it: active and confirmed orders
/// hold their units, pending ones hold them too and keep their deadlines
/// (`CampaignState::holds`).
pub fn gate_state(stored: &crate::ledger::GateSnapshot) -> CampaignState {
    let mut rebuild = Rebuild::new(
        stored.def.clone(),
        stored.total,
        stored.status,
        stored.max_seq,
    );
    for code in &stored.codes {
        rebuild.code(code.clone());
    }
    for (user, qty, codes) in &stored.active {
        rebuild.order(user, *qty, codes);
    }
    for p in &stored.pending {
        rebuild.pending(p.seq, &p.user_id, p.qty, &p.codes, p.pay_by);
    }
    rebuild.finish()
}
