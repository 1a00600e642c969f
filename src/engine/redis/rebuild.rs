//! Putting a campaign into the gate — a new one, or one rebuilt from the ledger when Redis does
//! not have it — in bounded memory.
//!
//! A campaign of a million buyers used to travel as one `EVALSHA` with two million arguments,
//! built from every active order held at once. Now the rows stream from PostgreSQL in chunks
//! of [`CHUNK`] into staging keys private to this installation (`{c:<id>}:stage:<token>:…`,
//! same hash slot as the campaign): holders summed by PostgreSQL (`GROUP BY user_id`), the codes
//! held by active orders, the ids of released (cancelled) orders, then the campaign's codes in
//! hand-out order minus the held ones (`stage_pool.lua`). `install.lua` then renames the staged
//! keys into place in one atomic step, or drops them if another instance installed the
//! campaign first. Staging keys expire after [`STAGE_TTL_SECS`] (refreshed by every chunk), so
//! an installation cut short leaves nothing behind. Memory here is one chunk, whatever the
//! campaign's size (figures in docs/BENCHMARKS.md).

use futures::TryStreamExt;
use redis::RedisResult;

use super::conn::RedisConn;
use super::{Keys, ScaleOut};
use crate::domain::{Error, Kind, Status};
use crate::engine::state::CampaignDef;

/// Rows per staging command.
pub const CHUNK: usize = 1000;
/// Life of staging keys an installation never finished.
pub const STAGE_TTL_SECS: u64 = 600;

/// The staging keys of one installation.
pub struct Stage {
    pub users: String,
    pub codes: String,
    pub released: String,
    pub taken: String,
}

/// What `install.lua` writes besides the staged keys.
pub struct Installing<'a> {
    pub def: &'a CampaignDef,
    pub total: u64,
    pub remaining: u64,
    pub status: Status,
    /// Highest order number used.
    pub seq: u64,
}

impl Stage {
    pub fn new(campaign: &str) -> Self {
        let k = Keys::new(campaign);
        let token = hex::encode(rand::random::<[u8; 8]>());
        Self {
            users: k.staged(&token, "users"),
            codes: k.staged(&token, "codes"),
            released: k.staged(&token, "released"),
            taken: k.staged(&token, "taken"),
        }
    }

    async fn holders(&self, conn: &mut RedisConn, chunk: &[(String, u64)]) -> RedisResult<()> {
        let mut p = redis::pipe();
        p.hset_multiple(&self.users, chunk).ignore();
        p.expire(&self.users, STAGE_TTL_SECS as i64).ignore();
        p.query_async(conn).await
    }

    async fn add(&self, conn: &mut RedisConn, set: &str, chunk: &[String]) -> RedisResult<()> {
        let mut p = redis::pipe();
        p.sadd(set, chunk).ignore();
        p.expire(set, STAGE_TTL_SECS as i64).ignore();
        p.query_async(conn).await
    }

    async fn codes(&self, conn: &mut RedisConn, chunk: &[String]) -> RedisResult<()> {
        let mut p = redis::pipe();
        p.rpush(&self.codes, chunk).ignore();
        p.expire(&self.codes, STAGE_TTL_SECS as i64).ignore();
        p.query_async(conn).await
    }

    /// Best effort: the keys expire anyway.
    async fn drop_keys(&self, conn: &mut RedisConn) {
        let keys = [&self.users, &self.codes, &self.released, &self.taken];
        let _: RedisResult<()> = redis::cmd("DEL").arg(&keys).query_async(conn).await;
    }
}

/// Sends `items` to `flush` in chunks of [`CHUNK`].
struct Chunks<T> {
    buf: Vec<T>,
}

impl<T> Chunks<T> {
    fn new() -> Self {
        Self {
            buf: Vec::with_capacity(CHUNK),
        }
    }

    /// Adds one item; true when the buffer is full and must be flushed.
    fn push(&mut self, item: T) -> bool {
        self.buf.push(item);
        self.buf.len() >= CHUNK
    }

    fn take(&mut self) -> Vec<T> {
        std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK))
    }
}

impl ScaleOut {
    /// Installs a campaign just created in the ledger, with its codes; true if installed now.
    pub(super) async fn install_new(
        &self,
        c: &Installing<'_>,
        codes: &[String],
    ) -> RedisResult<bool> {
        let stage = Stage::new(&c.def.id);
        let mut conn = self.conn();
        let done = async {
            for chunk in codes.chunks(CHUNK) {
                stage.codes(&mut conn, chunk).await?;
            }
            self.scripts.install(&mut conn, c, &stage).await
        }
        .await;
        if done.is_err() {
            stage.drop_keys(&mut conn).await;
        }
        done
    }

    /// Rebuilds a campaign missing from Redis from the ledger. Unknown → 404.
    pub(super) async fn install_from_ledger(&self, id: &str) -> Result<(), Error> {
        let failed = "rebuilding the campaign from the ledger failed";
        let stored = self
            .ledger
            .stored(id)
            .await
            .map_err(|e| Error::unavailable(failed, format!("{e:#}")))?
            .ok_or_else(|| Error::campaign_not_found(id))?;
        let stage = Stage::new(id);
        let mut conn = self.conn();
        let staged = self
            .stage_from_ledger(id, &stored.def, &stage, &mut conn)
            .await;
        let installed = match staged {
            Ok(sold) => {
                let c = Installing {
                    def: &stored.def,
                    total: stored.total,
                    remaining: stored.total.saturating_sub(sold),
                    status: stored.status,
                    seq: stored.max_seq,
                };
                self.scripts
                    .install(&mut conn, &c, &stage)
                    .await
                    .map(|done| done.then_some(c.remaining))
                    .map_err(anyhow::Error::from)
            }
            Err(e) => Err(e),
        };
        match installed {
            Ok(Some(remaining)) => {
                tracing::warn!(
                    campaign = id,
                    remaining,
                    "campaign rebuilt in Redis from the ledger"
                );
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                stage.drop_keys(&mut conn).await;
                Err(Error::unavailable(failed, format!("{e:#}")))
            }
        }
    }

    /// Streams the campaign's holders, held codes, released orders and pool into `stage`;
    /// returns the units its active orders hold.
    async fn stage_from_ledger(
        &self,
        id: &str,
        def: &CampaignDef,
        stage: &Stage,
        conn: &mut RedisConn,
    ) -> anyhow::Result<u64> {
        let mut sold = 0u64;
        let mut holders = self.ledger.holdings(id);
        let mut chunk = Chunks::new();
        while let Some((user, held)) = holders.try_next().await? {
            sold = sold.saturating_add(held);
            if chunk.push((user, held)) {
                stage.holders(conn, &chunk.take()).await?;
            }
        }
        if !chunk.buf.is_empty() {
            stage.holders(conn, &chunk.take()).await?;
        }
        let mut released = self.ledger.cancelled_ids(id);
        let mut chunk = Chunks::new();
        while let Some(order_id) = released.try_next().await? {
            if chunk.push(order_id) {
                stage.add(conn, &stage.released, &chunk.take()).await?;
            }
        }
        if !chunk.buf.is_empty() {
            stage.add(conn, &stage.released, &chunk.take()).await?;
        }
        if def.kind == Kind::Codes {
            let mut taken = self.ledger.held_codes(id);
            let mut chunk = Chunks::new();
            while let Some(code) = taken.try_next().await? {
                if chunk.push(code) {
                    stage.add(conn, &stage.taken, &chunk.take()).await?;
                }
            }
            if !chunk.buf.is_empty() {
                stage.add(conn, &stage.taken, &chunk.take()).await?;
            }
            let mut codes = self.ledger.codes(id);
            let mut chunk = Chunks::new();
            while let Some(code) = codes.try_next().await? {
                if chunk.push(code) {
                    self.scripts.stage_pool(conn, stage, &chunk.take()).await?;
                }
            }
            if !chunk.buf.is_empty() {
                self.scripts.stage_pool(conn, stage, &chunk.take()).await?;
            }
        }
        Ok(sold)
    }
}
