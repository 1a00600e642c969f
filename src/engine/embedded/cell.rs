//! One campaign of the embedded engine: its state and idempotency slots behind one mutex, an
//! async mutex that serialises admin operations, and its entry on the guard's stock board.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::domain::{CampaignView, Error, Order, Status};
use crate::engine::idempotency::{IdemLimits, IdemSlots};
use crate::engine::state::CampaignState;
use crate::guard::soldout::{StockBoard, StockEntry, StockFacts};

pub(super) struct Inner {
    pub(super) state: CampaignState,
    pub(super) idem: IdemSlots,
}

/// One confirm waiting for its campaign's next batch (`confirm.rs`).
pub(super) struct QueuedConfirm {
    pub(super) order_id: String,
    pub(super) seq: u64,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<Order, Error>>,
}

pub(super) struct CampaignCell {
    pub(super) inner: Mutex<Inner>,
    pub(super) admin: tokio::sync::Mutex<()>,
    /// Confirms waiting for the next batch (`confirm.rs`), decided under `admin`.
    pub(super) confirms: Mutex<Vec<QueuedConfirm>>,
    /// This campaign on the guard's stock board; written under `inner`'s lock.
    pub(super) signal: Arc<StockEntry>,
    /// The group commit's epoch this state was built in; every write decided on it is
    /// submitted with it, so nothing decided before an in-process recovery is ever written.
    pub(super) epoch: u64,
}

impl CampaignCell {
    pub(super) fn new(
        state: CampaignState,
        board: &StockBoard,
        epoch: u64,
        idem: IdemLimits,
    ) -> Arc<Self> {
        let def = &state.def;
        let signal = board.register(
            &def.id,
            StockFacts {
                per_user_limit: def.per_user_limit,
                starts_at: def.starts_at,
                ends_at: def.ends_at,
            },
        );
        // Holders first, then the state that may be sold out (see guard::soldout): the entry
        // starts closed to the fast path, so a holder never hears `sold_out` meanwhile.
        signal.add_holders(state.holder_ids(), state.holders());
        publish(&signal, &state);
        Arc::new(Self {
            inner: Mutex::new(Inner {
                state,
                idem: IdemSlots::new(idem),
            }),
            admin: tokio::sync::Mutex::new(()),
            confirms: Mutex::new(Vec::new()),
            signal,
            epoch,
        })
    }

    /// Publishes the campaign's stock and status; call with `inner` locked, after a change.
    pub(super) fn publish(&self, inner: &Inner) {
        publish(&self.signal, &inner.state);
    }

    pub(super) fn view(&self) -> CampaignView {
        self.inner.lock().state.view()
    }
}

fn publish(signal: &StockEntry, state: &CampaignState) {
    signal.publish(state.remaining, state.status == Status::Active);
}
