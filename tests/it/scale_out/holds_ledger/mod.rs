//! The ledger half of scale-out holds: stream entries XADDed straight into a campaign's order
//! stream (new orders with `pay_by`, transitions of pending orders) and applied by the real
//! pipeline `Consumer` to a real PostgreSQL; the rows, audit events, `failed_orders` and the
//! rebuilt gate state are read back. The gate half (the Lua scripts that write these entries)
//! is not needed: the entries are written as the shared stream format describes them.

mod poison;
mod race;
mod snapshot;
mod transitions;

use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use sqlx::Connection;

use seckill::domain::{Kind, Order};
use seckill::engine::scale_out::{Keys, RedisConn, RedisTarget, Scripts, GROUP};
use seckill::engine::state::CampaignDef;
use seckill::ledger::{Ledger, PgLedger};
use seckill::pipeline::{Consumer, PipelineOptions, Step};

use crate::servers::{pg, RedisServer};

/// µs since the epoch of every order's win in these tests; `pay_by` is a minute later.
pub const WON: i64 = 1_800_000_000_000_000;
pub const HOLD_US: i64 = 60_000_000;

pub struct Rig {
    pub _redis: RedisServer,
    pub db: String,
    pub target: RedisTarget,
    pub ledger: Arc<PgLedger>,
    pub raw: redis::aio::MultiplexedConnection,
}

impl Rig {
    /// A fresh redis-server and database with campaign `id` (60-second holds) in the ledger
    /// and its stream's consumer group in Redis.
    pub async fn start(id: &str, total: u64, codes: &[&str]) -> Rig {
        let redis = RedisServer::start(&[]);
        let db = pg().fresh_db().await;
        let ledger = Arc::new(PgLedger::open(&db, 8).await.unwrap());
        let kind = if codes.is_empty() {
            Kind::Stock
        } else {
            Kind::Codes
        };
        let def = CampaignDef {
            id: id.into(),
            kind,
            per_user_limit: 5,
            starts_at: None,
            ends_at: None,
            hold_seconds: Some(60),
            waiting_room: None,
        };
        let codes: Vec<String> = codes.iter().map(|c| c.to_string()).collect();
        ledger
            .create_campaign(&def, total, &codes, seckill::domain::now())
            .await
            .unwrap();
        let mut raw = redis::Client::open(redis.url().as_str())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&crate::servers::patient())
            .await
            .unwrap();
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(Keys::new(id).orders())
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut raw)
            .await
            .unwrap();
        let target = RedisTarget {
            urls: vec![redis.url()],
            cluster: false,
            sentinel_master: None,
        };
        Rig {
            _redis: redis,
            db,
            target,
            ledger,
            raw,
        }
    }

    pub async fn consumer(&self, name: &str, batch: usize, reclaim_after: Duration) -> Consumer {
        let conn = RedisConn::connect(&self.target).await.unwrap();
        let opts = PipelineOptions {
            batch,
            reclaim_after,
            consumer: name.into(),
            ..PipelineOptions::new()
        };
        Consumer::new(
            conn,
            self.ledger.clone(),
            Arc::new(Scripts::default()),
            opts,
        )
    }

    /// Adds an entry to `campaign`'s stream, raising the gate's numbering to its order's number
    /// as the claim scripts do (the pipeline fences a gate found behind what it wrote).
    pub async fn xadd(&mut self, campaign: &str, fields: &[(String, String)]) -> String {
        let number = fields
            .iter()
            .find(|(k, _)| k == "order_id")
            .and_then(|(_, id)| id.rsplit_once('-'))
            .and_then(|(_, n)| n.parse::<u64>().ok());
        if let Some(n) = number {
            let _: () = redis::Script::new(
                "if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then \
                 redis.call('SET', KEYS[1], ARGV[1]) end",
            )
            .key(Keys::new(campaign).seq())
            .arg(n)
            .invoke_async(&mut self.raw)
            .await
            .unwrap();
        }
        let mut cmd = redis::cmd("XADD");
        cmd.arg(Keys::new(campaign).orders()).arg("*");
        for (k, v) in fields {
            cmd.arg(k).arg(v);
        }
        cmd.query_async(&mut self.raw).await.unwrap()
    }

    pub async fn order(&self, id: &str) -> Order {
        self.ledger
            .order(id)
            .await
            .unwrap()
            .expect("the order is in the ledger")
    }

    /// Audit events of one order's resolutions, as (kind, at µs).
    pub async fn resolutions(&self, order_id: &str) -> Vec<(String, i64)> {
        let mut conn = sqlx::PgConnection::connect(&self.db).await.unwrap();
        sqlx::query_as(
            "SELECT kind, at FROM events WHERE detail = $1 \
             AND kind IN ('confirmed', 'expired', 'cancel') ORDER BY id",
        )
        .bind(order_id)
        .fetch_all(&mut conn)
        .await
        .unwrap()
    }
}

/// The fields of a new-order entry of a campaign with holds (order `<campaign>-<seq>`).
pub fn new_order(campaign: &str, seq: u64, user: &str, codes: &[&str]) -> Vec<(String, String)> {
    let mut f = vec![
        ("order_id".into(), format!("{campaign}-{seq}")),
        ("user".into(), user.to_owned()),
        ("qty".into(), "1".into()),
        ("at".into(), (WON + seq as i64).to_string()),
        ("pay_by".into(), (WON + seq as i64 + HOLD_US).to_string()),
    ];
    if !codes.is_empty() {
        f.push(("codes".into(), codes.join("\n")));
    }
    f
}

/// A transition entry: `kind`, `resolved_at` and the whole order again.
pub fn transition(
    kind: &str,
    resolved_at: i64,
    order: &[(String, String)],
) -> Vec<(String, String)> {
    let mut f = vec![
        ("kind".into(), kind.to_owned()),
        ("resolved_at".into(), resolved_at.to_string()),
    ];
    f.extend(order.iter().cloned());
    f
}

pub fn us(t: i64) -> Option<chrono::DateTime<chrono::Utc>> {
    DateTime::from_timestamp_micros(t)
}

/// Steps until a step reads nothing; the sum of the steps.
pub async fn drain(c: &mut Consumer) -> Step {
    let mut sum = Step::default();
    loop {
        let s = c.step().await.unwrap();
        if s.read == 0 {
            return sum;
        }
        sum.read += s.read;
        sum.persisted += s.persisted;
        sum.poisoned += s.poisoned;
    }
}
