//! What the gate tells about a campaign: its view as Redis holds it (the units in pending
//! orders included), the stock board's notes after a claim, and the checks a claim needs
//! before it goes to Redis.

use redis::AsyncCommands;

use super::{redis_failed, refuse, Keys, RedisConn, ScaleOut};
use crate::domain::{CampaignView, ClaimAnswer, Error, HoldsView, Kind, Status};

impl ScaleOut {
    /// The campaign's view: the gate's, or the ledger's for a dormant campaign Redis lacks
    /// (never rebuilt for a read, dormant.rs); any other campaign Redis lacks is rebuilt.
    pub(super) async fn view(&self, id: &str) -> Result<CampaignView, Error> {
        for _ in 0..3 {
            if let Some(mut v) = self.gate_view(id).await? {
                v.waiting_room = self.room_of(id).await?;
                return Ok(v);
            }
            let now = self.dormancy_now_for(id).await?;
            if let Some(state) = self.dormant_in_ledger(id, now).await? {
                return Ok(state.view());
            }
            // Unknown to the ledger too → 404; else rebuilt (Redis may lose it again meanwhile).
            self.install_from_ledger(id).await?;
        }
        Err(Error::Unavailable(format!(
            "campaign '{id}' keeps disappearing from Redis; retry later"
        )))
    }

    /// The campaign as the gate holds it; `None` if Redis does not have it.
    pub(super) async fn gate_view(&self, id: &str) -> Result<Option<CampaignView>, Error> {
        let fields: Vec<Option<String>> = self
            .conn()
            .hmget(
                Keys::new(id).meta(),
                &[
                    "kind",
                    "total",
                    "remaining",
                    "limit",
                    "status",
                    "starts",
                    "ends",
                    "hold",
                    "pending",
                ],
            )
            .await
            .map_err(redis_failed("reading the campaign from Redis failed"))?;
        let [kind, total, remaining, limit, status, starts, ends, hold, pending]: [Option<String>;
            9] = fields
            .try_into()
            .map_err(|_| Error::Unavailable("bad reply".into()))?;
        let Some(kind) = kind else { return Ok(None) };
        let bad = || Error::unavailable("the campaign in Redis is malformed", id);
        let num = |v: Option<String>| v.and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
        let at = |s: String| {
            s.parse()
                .ok()
                .and_then(chrono::DateTime::from_timestamp_micros)
        };
        let time = |v: Option<String>| v.filter(|s| !s.is_empty()).map(|s| at(s).ok_or_else(bad));
        Ok(Some(CampaignView {
            id: id.to_owned(),
            kind: Kind::parse(&kind).ok_or_else(bad)?,
            total: num(total)?,
            remaining: num(remaining)?,
            per_user_limit: num(limit)?,
            status: status.as_deref().and_then(Status::parse).ok_or_else(bad)?,
            starts_at: time(starts).transpose()?,
            ends_at: time(ends).transpose()?,
            holds: match hold {
                Some(h) => Some(HoldsView {
                    hold_seconds: h.parse().map_err(|_| bad())?,
                    pending: num(pending.or(Some("0".into())))?,
                }),
                None => None,
            },
            // Not kept in Redis: the HTTP layer adds it from the ledger's definition.
            waiting_room: None,
        }))
    }

    /// Tells the stock board what a claim script answered (see `stock.rs`).
    pub(super) async fn note_stock(&self, id: &str, user: &str, a: &ClaimAnswer) {
        match (a.outcome, a.remaining) {
            (crate::domain::Outcome::Won, _) => self.stock.won(id, user),
            (crate::domain::Outcome::SoldOut, Some(remaining)) => {
                // Off the request path: this claim already has its answer, and loading the
                // holders of a large campaign takes a while.
                let Some(me) = self.me.upgrade() else { return };
                let id = id.to_owned();
                tokio::spawn(async move {
                    let facts = async {
                        let v = me.gate_view(&id).await.ok().flatten()?;
                        Some(crate::guard::soldout::StockFacts {
                            per_user_limit: v.per_user_limit,
                            starts_at: v.starts_at,
                            ends_at: v.ends_at,
                        })
                    };
                    me.stock.sold_out(&id, remaining, facts).await;
                });
            }
            _ => {}
        }
    }

    /// Refuses claims while Redis may evict keys or a task they depend on is down.
    pub(super) fn dependencies_up(&self) -> Result<(), Error> {
        refuse::unless_dependencies_up(&self.settings, &self.supervisor, &self.claim_depends)
    }

    /// Orders answered `won` but not yet in the ledger, over every campaign.
    pub async fn lag(&self) -> anyhow::Result<u64> {
        stream_lag(&mut self.conn(), &self.ledger.campaign_ids().await?).await
    }
}

/// Orders waiting in the streams of `campaigns` (won, not yet in the ledger): what the order
/// pipeline has still to move.
pub async fn stream_lag(conn: &mut RedisConn, campaigns: &[String]) -> anyhow::Result<u64> {
    let mut total = 0;
    for id in campaigns {
        let k = Keys::new(id);
        let (entries, packed): (u64, Option<i64>) = redis::pipe()
            .cmd("XLEN")
            .arg(k.orders())
            .cmd("GET")
            .arg(k.packed())
            .query_async(conn)
            .await?;
        total += entries + packed.unwrap_or(0).max(0) as u64;
    }
    Ok(total)
}
