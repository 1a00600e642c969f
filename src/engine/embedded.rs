//! The embedded deployment: per-campaign state in process, SQLite ledger, group commit.
//!
//! Each campaign has its own `parking_lot` mutex; a claim locks only its campaign, runs the
//! atomic step of [`CampaignState::decide`], and — still under the lock, so ledger order equals
//! decision order — submits the order to the group commit. The lock is released before any
//! waiting. The answer is sent only after the commit; if it fails, the commit callback gives the
//! units back and the client gets 503. Admin operations additionally take a per-campaign async
//! mutex so they never interleave with each other.
//!
//! Every change of a campaign's stock or status is published to the guard's stock board
//! under the same lock, before the operation answers (see `guard::soldout`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;

use crate::domain::now;
use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use super::idempotency::{self, IdemSlots, Slot};
use super::state::{CampaignDef, CampaignState, Decision};
use crate::backend::Backend;
use crate::domain::{
    parse_order_id, CampaignLimits, CampaignView, ClaimAnswer, ClaimRequest, Error, IdempotencyKey,
    Kind, NewCampaign, Order, OrderPage, OrderQuery, OrderState, Restock, Status, Supply,
};
use crate::guard::soldout::{StockBoard, StockEntry, StockFacts};
use crate::ledger::{CommitError, GroupCommit, IdemRecord, Ledger, LedgerWrite, SqliteLedger};

/// Settings of the embedded deployment.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    pub data_dir: PathBuf,
    /// fsync every commit (survives power loss) rather than only surviving a process crash.
    pub synchronous_full: bool,
    /// Most writes one group commit may carry.
    pub max_batch: usize,
    /// How long Idempotency-Key answers are kept.
    pub idempotency_ttl: Duration,
}

impl EmbeddedOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            synchronous_full: true,
            max_batch: 4096,
            idempotency_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

struct Inner {
    state: CampaignState,
    idem: IdemSlots,
}

struct Cell {
    inner: Mutex<Inner>,
    admin: tokio::sync::Mutex<()>,
    /// This campaign on the guard's stock board; written under `inner`'s lock.
    signal: Arc<StockEntry>,
}

impl Cell {
    fn new(state: CampaignState, board: &StockBoard) -> Arc<Self> {
        let def = &state.def;
        let signal = board.register(
            &def.id,
            StockFacts {
                per_user_limit: def.per_user_limit,
                starts_at: def.starts_at,
                ends_at: def.ends_at,
            },
        );
        publish(&signal, &state);
        Arc::new(Self {
            inner: Mutex::new(Inner {
                state,
                idem: IdemSlots::default(),
            }),
            admin: tokio::sync::Mutex::new(()),
            signal,
        })
    }

    /// Publishes the campaign's stock and status; call with `inner` locked, after a change.
    fn publish(&self, inner: &Inner) {
        publish(&self.signal, &inner.state);
    }

    fn view(&self) -> CampaignView {
        self.inner.lock().state.view()
    }
}

fn publish(signal: &StockEntry, state: &CampaignState) {
    signal.publish(state.remaining, state.status == Status::Active);
}

pub struct Embedded {
    campaigns: RwLock<HashMap<String, Arc<Cell>>>,
    board: Arc<StockBoard>,
    ledger: Arc<SqliteLedger>,
    commit: GroupCommit,
    create: tokio::sync::Mutex<()>,
    idempotency_ttl: chrono::Duration,
}

fn commit_failed(e: CommitError) -> Error {
    Error::unavailable("the change could not be committed to the ledger", e)
}

impl Embedded {
    /// Opens the ledger in `opts.data_dir` and rebuilds every campaign's state from it.
    pub async fn open(opts: EmbeddedOptions) -> anyhow::Result<Arc<Self>> {
        let ledger = Arc::new(SqliteLedger::open(&opts.data_dir, opts.synchronous_full).await?);
        let ttl = chrono::Duration::from_std(opts.idempotency_ttl)?;
        let mut campaigns = HashMap::new();
        let board = StockBoard::new();
        for stored in ledger.snapshot(Utc::now() - ttl).await? {
            let state = CampaignState::recover(
                stored.def.clone(),
                stored.total,
                stored.codes,
                stored.status,
                &stored.active,
                stored.max_seq,
            );
            let holders: Vec<&String> = stored.active.iter().map(|(u, _, _)| u).collect();
            let cell = Cell::new(state, &board);
            for user in holders {
                cell.signal.add_holder(user);
            }
            {
                let mut inner = cell.inner.lock();
                for r in stored.idem {
                    inner
                        .idem
                        .insert(r.user_id, r.key, Slot::Done(r.answer, r.created_at));
                }
                let v = inner.state.view();
                tracing::info!(campaign = %v.id, total = v.total, remaining = v.remaining, status = v.status.as_str(), "campaign recovered");
            }
            campaigns.insert(stored.def.id, cell);
        }
        let commit = GroupCommit::spawn(ledger.clone(), opts.max_batch);
        let me = Arc::new(Self {
            campaigns: RwLock::new(campaigns),
            board,
            ledger,
            commit,
            create: tokio::sync::Mutex::new(()),
            idempotency_ttl: ttl,
        });
        tokio::spawn(prune_loop(Arc::downgrade(&me)));
        Ok(me)
    }

    fn cell(&self, id: &str) -> Result<Arc<Cell>, Error> {
        self.campaigns
            .read()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::campaign_not_found(id))
    }

    /// Drops idempotency answers past their retention, in memory and in the ledger.
    async fn prune(&self) {
        let cutoff = Utc::now() - self.idempotency_ttl;
        let cells: Vec<_> = self.campaigns.read().values().cloned().collect();
        let dropped: usize = cells
            .iter()
            .map(|c| c.inner.lock().idem.prune(cutoff))
            .sum();
        match self.ledger.prune_idempotency(cutoff).await {
            Ok(rows) => tracing::debug!(dropped, rows, "idempotency answers pruned"),
            Err(e) => tracing::warn!(error = %e, "pruning idempotency answers failed"),
        }
    }
}

async fn prune_loop(me: std::sync::Weak<Embedded>) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tick.tick().await;
        match me.upgrade() {
            Some(me) => me.prune().await,
            None => return,
        }
    }
}

#[async_trait]
impl Backend for Embedded {
    async fn create_campaign(&self, c: NewCampaign) -> Result<CampaignView, Error> {
        let _one_at_a_time = self.create.lock().await;
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
        };
        let total = c.total();
        let codes = match c.supply {
            Supply::Stock(_) => Vec::new(),
            Supply::Codes(codes) => codes,
        };
        self.commit
            .run(vec![LedgerWrite::CreateCampaign {
                def: def.clone(),
                total,
                codes: codes.clone(),
                status: Status::Active,
                at: now(),
            }])
            .await
            .map_err(commit_failed)?;
        let cell = Cell::new(
            CampaignState::new(def, total, codes, Status::Active),
            &self.board,
        );
        let view = cell.view();
        self.campaigns.write().insert(c.id, cell);
        tracing::info!(campaign = %view.id, kind = view.kind.as_str(), total, "campaign created");
        Ok(view)
    }

    async fn campaign(&self, id: &str) -> Result<CampaignView, Error> {
        Ok(self.cell(id)?.view())
    }

    async fn restock(&self, id: &str, restock: Restock) -> Result<CampaignView, Error> {
        let cell = self.cell(id)?;
        let _admin = cell.admin.lock().await;
        {
            let inner = cell.inner.lock();
            restock.check_against(inner.state.def.kind, inner.state.total)?;
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
        self.commit
            .run(vec![LedgerWrite::Restock {
                campaign_id: id.to_owned(),
                units,
                codes,
                at: now(),
            }])
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

    async fn set_status(&self, id: &str, to: Status) -> Result<CampaignView, Error> {
        let cell = self.cell(id)?;
        let _admin = cell.admin.lock().await;
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
                .submit(vec![write], move |r| {
                    let _ = tx.send(r);
                })
                .inspect_err(|_| {
                    inner.state.status = previous;
                    cell.publish(&inner);
                })
                .map_err(commit_failed)?;
            previous
        };
        let committed = rx
            .await
            .unwrap_or_else(|_| Err(CommitError("the ledger writer has stopped".into())));
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

    async fn claim(
        &self,
        id: &str,
        req: ClaimRequest,
        key: Option<IdempotencyKey>,
    ) -> Result<ClaimAnswer, Error> {
        let cell = self.cell(id)?;
        let now = now();
        let rx = 'decide: {
            let mut inner = cell.inner.lock();
            if let Some(k) = &key {
                match inner.idem.get(&req.user_id, k.as_str()) {
                    Some(Slot::Done(answer, _)) => return Ok(answer.clone()),
                    // Someone is already processing this key: wait for their answer.
                    Some(Slot::Pending(rx)) => break 'decide rx.clone(),
                    None => {}
                }
            }
            let kind = inner.state.def.kind;
            let (answer, reservation) = match inner.state.decide(&req.user_id, req.qty, now) {
                Decision::Rejected(answer) => (answer, None),
                Decision::Won(r) => {
                    // Holder first, then the stock its win left (see guard::soldout).
                    cell.signal.add_holder(&r.user_id);
                    cell.publish(&inner);
                    (r.answer(kind), Some(r))
                }
            };
            if reservation.is_none() && key.is_none() {
                return Ok(answer);
            }
            let mut writes = Vec::with_capacity(2);
            if let Some(r) = &reservation {
                writes.push(LedgerWrite::Order(Order {
                    order_id: r.order_id.clone(),
                    campaign_id: id.to_owned(),
                    user_id: r.user_id.clone(),
                    qty: r.qty,
                    codes: (kind == Kind::Codes).then(|| r.codes.clone()),
                    state: OrderState::Active,
                    created_at: r.created_at,
                    cancelled_at: None,
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
                inner
                    .idem
                    .insert(user.clone(), k.clone(), Slot::Pending(rx.clone()));
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
                        result.is_ok(),
                        reservation.as_ref(),
                        idem,
                        &answer,
                        now,
                    );
                    let _ = tx.send(Some(result.map(|()| answer).map_err(|e| e.to_string())));
                }
            };
            if let Err(e) = self.commit.submit(writes, on_commit) {
                settle(
                    &cell,
                    &mut inner,
                    false,
                    reservation.as_ref(),
                    idem,
                    &answer,
                    now,
                );
                return Err(commit_failed(e));
            }
            rx
        };
        idempotency::wait(rx).await
    }

    async fn order(&self, order_id: &str) -> Result<Order, Error> {
        parse_order_id(order_id)?;
        self.ledger
            .order(order_id)
            .await
            .map_err(|e| Error::unavailable("reading the order failed", e))?
            .ok_or_else(|| Error::order_not_found(order_id))
    }

    async fn orders(&self, campaign_id: &str, query: OrderQuery) -> Result<OrderPage, Error> {
        self.cell(campaign_id)?;
        crate::ledger::order_page(&*self.ledger, campaign_id, &query).await
    }

    async fn cancel(&self, order_id: &str) -> Result<Order, Error> {
        let (campaign_id, _) = parse_order_id(order_id)?;
        let cell = self
            .cell(campaign_id)
            .map_err(|_| Error::order_not_found(order_id))?;
        let _admin = cell.admin.lock().await;
        let mut order = self.order(order_id).await?;
        if order.state == OrderState::Cancelled {
            return Ok(order);
        }
        let at = now();
        self.commit
            .run(vec![LedgerWrite::Cancel {
                order_id: order_id.to_owned(),
                at,
            }])
            .await
            .map_err(commit_failed)?;
        let codes = order.codes.clone().unwrap_or_default();
        {
            let mut inner = cell.inner.lock();
            inner.state.release(&order.user_id, order.qty, &codes);
            cell.publish(&inner);
        }
        order.state = OrderState::Cancelled;
        order.cancelled_at = Some(at);
        tracing::info!(order = order_id, qty = order.qty, "order cancelled");
        Ok(order)
    }

    async fn health(&self) -> Result<(), Error> {
        self.ledger
            .ping()
            .await
            .map_err(|e| Error::unavailable("the ledger does not answer", e))?;
        self.commit.flush().await.map_err(commit_failed)
    }

    async fn shutdown(&self) {
        if let Err(e) = self.commit.flush().await {
            tracing::error!(error = %e, "final ledger flush failed");
        }
    }

    async fn set_limits(&self, id: &str, limits: CampaignLimits) -> Result<CampaignLimits, Error> {
        let cell = self.cell(id)?;
        let _admin = cell.admin.lock().await;
        self.commit
            .run(vec![LedgerWrite::Limits {
                campaign_id: id.to_owned(),
                limits,
                at: now(),
            }])
            .await
            .map_err(commit_failed)?;
        tracing::info!(campaign = id, limits = %serde_json::json!(limits), "rate limits set");
        Ok(limits)
    }

    async fn all_limits(&self) -> Result<Vec<(String, CampaignLimits)>, Error> {
        self.ledger
            .campaign_limits()
            .await
            .map_err(|e| Error::unavailable("reading rate limits failed", e))
    }

    fn stock_board(&self) -> Option<Arc<StockBoard>> {
        Some(self.board.clone())
    }
}

/// Makes a decision final (commit succeeded) or undoes it (commit failed).
fn settle(
    cell: &Cell,
    inner: &mut Inner,
    committed: bool,
    reservation: Option<&super::state::Reservation>,
    idem: Option<(String, String)>,
    answer: &ClaimAnswer,
    at: chrono::DateTime<Utc>,
) {
    if committed {
        if let Some((user, key)) = idem {
            inner.idem.insert(user, key, Slot::Done(answer.clone(), at));
        }
        return;
    }
    if let Some(r) = reservation {
        inner.state.release(&r.user_id, r.qty, &r.codes);
        cell.publish(inner);
    }
    if let Some((user, key)) = idem {
        inner.idem.remove(&user, &key);
    }
}
