//! Dormant campaigns Redis does not hold, answered from the ledger.
//!
//! A campaign that can sell nothing any more (closed, or past its `ends_at`, with no pending
//! order: `PgLedger::dormant_state`) is not rebuilt into Redis when Redis lost it, neither at
//! start nor later: a rebuild writes every buyer it ever had in one script call, which blocks
//! Redis, and with it the live sale, for about 0.25 s per 200,000 buyers. Its view and its
//! claims are answered from the ledger's definition and counts, in the engine's order (status,
//! then window): the answers its gate would give. A claim with an Idempotency-Key is answered
//! here only `closed` or `ended`, which no change can alter; a keyed `paused` goes through
//! Redis, which keeps it (answered here, it could become `ended` on a replay after a resume).
//! An admin change that needs its buyers (a restock, a cancel, a status change) rebuilds it
//! first, as for any campaign Redis lacks.

use std::sync::LazyLock;

use chrono::{DateTime, TimeDelta, Utc};

use super::admin::ledger_failed;
use super::keys::Keys;
use super::{redis_failed, ScaleOut};
use crate::domain::{ClaimAnswer, ClaimRequest, Error, Outcome};
use crate::engine::state::{CampaignState, Decision};

/// How long after its `ends_at` by Redis's clock a campaign counts as ended here: one that
/// ended more recently (or whose node's clock runs behind the node asked) is rebuilt and asked,
/// never answered `ended` early.
const ENDED_MARGIN: TimeDelta = TimeDelta::seconds(5);

/// Reads the clock of the node serving a campaign (`lua/clock.lua`).
static CLOCK: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("lua/clock.lua")));

impl ScaleOut {
    /// The time dormancy is judged at: Redis's clock, which its scripts judge sale windows by
    /// (one clock for every instance, whatever theirs say), less [`ENDED_MARGIN`].
    pub(super) async fn dormancy_now(&self) -> Result<DateTime<Utc>, Error> {
        let time = redis::cmd("TIME").query_async(&mut self.conn()).await;
        redis_time(time)
    }

    /// [`Self::dormancy_now`] by the clock of the node serving campaign `id` (in a Cluster,
    /// the node its claims go to, not any node a keyless command may reach).
    pub(super) async fn dormancy_now_for(&self, id: &str) -> Result<DateTime<Utc>, Error> {
        let time = CLOCK
            .key(Keys::new(id).meta())
            .invoke_async(&mut self.conn())
            .await;
        redis_time(time)
    }

    /// Campaign `id` as the ledger holds it if it is dormant at `now` (module docs).
    pub(super) async fn dormant_in_ledger(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<CampaignState>, Error> {
        let row = self
            .ledger
            .dormant_state(id, now)
            .await
            .map_err(ledger_failed("reading the campaign failed"))?;
        // The gate's numbering is not needed: a dormant campaign never numbers an order.
        Ok(row.map(|d| CampaignState::dormant(d.def, d.total, d.status, d.live_units, 0)))
    }

    /// The answer to a claim on a campaign Redis lacks, if the ledger says it is dormant and
    /// the answer needs no keeping; `None`: rebuild it and ask the gate. A keyed claim is
    /// answered here only `closed` or `ended`, which no later change can alter (a `paused`
    /// could become `ended` after a resume, and Redis keeps a keyed claim's first answer).
    pub(super) async fn dormant_answer(
        &self,
        id: &str,
        req: &ClaimRequest,
        keyed: bool,
    ) -> Result<Option<ClaimAnswer>, Error> {
        let now = self.dormancy_now_for(id).await?;
        let Some(mut state) = self.dormant_in_ledger(id, now).await? else {
            return Ok(None);
        };
        let final_answer = |a: &ClaimAnswer| matches!(a.outcome, Outcome::Closed | Outcome::Ended);
        Ok(match state.decide(&req.user_id, req.qty, now) {
            Decision::Rejected(a) if !keyed || final_answer(&a) => Some(a),
            _ => None,
        })
    }
}

/// Redis's `TIME` reply, less [`ENDED_MARGIN`].
fn redis_time(time: redis::RedisResult<(i64, u32)>) -> Result<DateTime<Utc>, Error> {
    let (secs, micros) = time.map_err(redis_failed("reading Redis's clock failed"))?;
    let now = DateTime::from_timestamp(secs, micros.saturating_mul(1000))
        .ok_or_else(|| Error::Unavailable(format!("Redis's clock reads {secs} s")))?;
    Ok(now - ENDED_MARGIN)
}
