//! The scale-out ledger's part of the waiting rooms (migration 0012): the deployment's room
//! key, shared by every instance, and a campaign's room settings. The rooms themselves live in
//! Redis (`crate::room::redis`).

use super::PgLedger;
use crate::domain::WaitingRoom;

impl PgLedger {
    /// The room key: drawn by the first instance that asks, then read by every other.
    pub async fn room_key(&self) -> anyhow::Result<[u8; 32]> {
        let fresh: [u8; 32] = rand::random();
        sqlx::query(
            "INSERT INTO room_key (singleton, key) VALUES (TRUE, $1) ON CONFLICT DO NOTHING",
        )
        .bind(&fresh[..])
        .execute(&self.pool)
        .await?;
        let key: Vec<u8> = sqlx::query_scalar("SELECT key FROM room_key WHERE singleton")
            .fetch_one(&self.pool)
            .await?;
        key.try_into()
            .map_err(|_| anyhow::anyhow!("the room key is not 32 bytes"))
    }

    /// `None`: no such campaign; `Some(None)`: a campaign without a room.
    pub async fn waiting_room(&self, id: &str) -> anyhow::Result<Option<Option<WaitingRoom>>> {
        let row: Option<Option<String>> =
            sqlx::query_scalar("SELECT waiting_room FROM campaigns WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|w| w.as_deref().map(WaitingRoom::from_ledger).transpose())
            .transpose()
    }
}
