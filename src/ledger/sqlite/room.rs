//! The embedded ledger's waiting rooms (migration 0011): the deployment's room key, and every
//! join in arrival order. A batch of joins is one transaction on the one writer connection,
//! committed before any of them is answered, so a place once told is a place on disk
//! (`crate::room::embedded`).

use sqlx::Row;

use super::writer::statement_fault;
use super::SqliteLedger;
use crate::faults::{self, BatchFault};
use crate::ledger::WriteFault;

/// One join as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRow {
    pub campaign_id: String,
    pub user_id: String,
    /// Arrival order within the campaign, from 1.
    pub seq: i64,
    /// When the join was decided, µs since the epoch.
    pub joined_at: i64,
}

impl SqliteLedger {
    /// The room key, drawn on first use and never changed.
    pub async fn room_key(&self) -> anyhow::Result<[u8; 32]> {
        {
            let mut w = self.writer.lock().await;
            let fresh: [u8; 32] = rand::random();
            sqlx::query("INSERT OR IGNORE INTO room_key (id, key) VALUES (1, ?1)")
                .bind(&fresh[..])
                .execute(w.conn().await?)
                .await?;
        }
        let key: Vec<u8> = sqlx::query_scalar("SELECT key FROM room_key WHERE id = 1")
            .fetch_one(&self.readers)
            .await?;
        key.try_into()
            .map_err(|_| anyhow::anyhow!("the room key is not 32 bytes"))
    }

    /// Writes `rows` in one transaction. A [`WriteFault`] says what an error left: nothing
    /// (`NotCommitted`), nothing but the ledger holds rows memory does not (`Diverged`), or
    /// perhaps all of them (`Unknown`, an I/O error at COMMIT): the rooms must then be read
    /// again from here. `again`: the same rows are written again to settle an unknown outcome,
    /// so those already on disk are skipped.
    pub async fn room_joins(&self, rows: &[JoinRow], again: bool) -> Result<(), WriteFault> {
        let fault = faults::room_batch();
        if fault == BatchFault::DiskFull {
            return Err(WriteFault::NotCommitted(
                "database or disk is full (injected by SECKILL_FAULTS)".into(),
            ));
        }
        let mut w = self.writer.lock().await;
        w.begin().await?;
        let written = async {
            for chunk in rows.chunks(200) {
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO room_members (campaign_id, user_id, seq, joined_at) ",
                );
                q.push_values(chunk, |mut b, r| {
                    b.push_bind(&r.campaign_id)
                        .push_bind(&r.user_id)
                        .push_bind(r.seq)
                        .push_bind(r.joined_at);
                });
                if again {
                    q.push(" ON CONFLICT DO NOTHING");
                }
                q.build().execute(w.conn().await?).await?;
            }
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = written {
            let fault = statement_fault(&e);
            w.roll_back().await;
            return Err(fault);
        }
        if fault == BatchFault::UnknownRolledBack {
            w.roll_back().await;
            w.discard();
            return Err(WriteFault::Unknown(
                "disk I/O error at COMMIT, rolled back (injected by SECKILL_FAULTS)".into(),
            ));
        }
        w.commit().await?;
        if fault == BatchFault::UnknownAfterCommit {
            w.discard();
            return Err(WriteFault::Unknown(
                "disk I/O error after COMMIT (injected by SECKILL_FAULTS)".into(),
            ));
        }
        Ok(())
    }

    /// The campaigns with joins.
    pub async fn room_campaigns(&self) -> anyhow::Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT DISTINCT campaign_id FROM room_members")
                .fetch_all(&self.readers)
                .await?,
        )
    }

    /// Hands every join to `each`, by campaign and arrival order, one row at a time (a room
    /// of millions is never held twice in memory).
    pub async fn room_members(
        &self,
        each: impl FnMut(JoinRow) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        let rows = sqlx::query(
            "SELECT campaign_id, user_id, seq, joined_at FROM room_members \
             ORDER BY campaign_id, seq",
        );
        self.stream_joins(rows, each).await
    }

    /// [`Self::room_members`] of one campaign.
    pub async fn room_members_of(
        &self,
        campaign: &str,
        each: impl FnMut(JoinRow) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        let rows = sqlx::query(
            "SELECT campaign_id, user_id, seq, joined_at FROM room_members \
             WHERE campaign_id = ?1 ORDER BY seq",
        )
        .bind(campaign);
        self.stream_joins(rows, each).await
    }

    async fn stream_joins<'q>(
        &self,
        query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
        mut each: impl FnMut(JoinRow) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        use futures::TryStreamExt;
        let mut rows = query.fetch(&self.readers);
        let mut n = 0;
        while let Some(r) = rows.try_next().await? {
            each(JoinRow {
                campaign_id: r.get(0),
                user_id: r.get(1),
                seq: r.get(2),
                joined_at: r.get(3),
            })?;
            n += 1;
        }
        Ok(n)
    }
}
