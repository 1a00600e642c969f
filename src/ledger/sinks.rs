//! Where the event feed is delivered, as both ledgers keep it (migrations
//! `sqlite/0010_event_sinks.sql` and `postgres/0011_event_sinks.sql`): one row per sink (a
//! webhook endpoint or a NATS JetStream subject) with the position it has received up to,
//! the lease that says which instance delivers it, and the events it gave up on.
//!
//! The cursor is the sink's whole durable state: an instance that takes a sink over starts
//! after it, so an event is delivered at least once whoever dies when. It moves only under the
//! lease's fence (a deliverer that lost its lease writes nothing) and never back (a trigger
//! refuses it). Both ledgers run the same statements ([`sql`]); only the placeholders
//! differ.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

/// What a sink delivers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    Webhook,
    Nats,
}

impl SinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Webhook => "webhook",
            SinkKind::Nats => "nats",
        }
    }
}

/// A sink as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SinkRow {
    pub id: String,
    pub kind: String,
    pub target: String,
    pub subject: Option<String>,
    pub secret: Option<String>,
    pub origin: String,
    pub description: Option<String>,
    pub enabled: i64,
    pub disabled_reason: Option<String>,
    pub cursor: i64,
    pub created_at: i64,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    pub delivered: i64,
    pub failures: i64,
    pub failing_since: Option<i64>,
    pub last_error: Option<String>,
    pub last_delivered_at: Option<i64>,
    pub lost: i64,
    pub dead_letters: i64,
}

impl SinkRow {
    pub fn kind(&self) -> SinkKind {
        match self.kind.as_str() {
            "nats" => SinkKind::Nats,
            _ => SinkKind::Webhook,
        }
    }
}

/// A sink to add (or, for one configured by flags, to bring up to date).
#[derive(Debug, Clone)]
pub struct NewSink {
    pub id: String,
    pub kind: SinkKind,
    pub target: String,
    pub subject: Option<String>,
    pub secret: Option<String>,
    /// `flag` (configured at start, updated from the flags on every start) or `api`.
    pub origin: &'static str,
    pub description: Option<String>,
}

/// An event a sink gave up on, with the exact body it sent.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeadLetter {
    pub pos: i64,
    pub event_id: String,
    pub body: String,
    pub attempts: i64,
    pub last_error: String,
    pub dead_at: i64,
}

/// What one delivered batch moves: the cursor, the counts, the events given up on.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub cursor: u64,
    pub delivered: u64,
    /// Events retention removed before this sink received them.
    pub lost: u64,
    pub dead: Vec<DeadLetter>,
    /// Micros of the batch's last delivery, if any.
    pub delivered_at: Option<i64>,
}

/// The sinks' rows in a ledger.
#[async_trait]
pub trait SinkStore: Send + Sync {
    /// Every sink, oldest first, with its dead-letter count.
    async fn sinks(&self) -> anyhow::Result<Vec<SinkRow>>;
    /// One sink.
    async fn sink(&self, id: &str) -> anyhow::Result<Option<SinkRow>>;
    /// Adds `new` starting after `cursor`; a sink of that id already there keeps its cursor
    /// and counts and takes the new target, subject, secret and description. `false` when an
    /// `api` sink of that id existed (nothing changed).
    async fn put_sink(&self, new: &NewSink, cursor: u64, now: i64) -> anyhow::Result<bool>;
    /// Removes a sink and its dead letters; `false` if there was none.
    async fn delete_sink(&self, id: &str) -> anyhow::Result<bool>;
    /// Enables or disables a sink (with the reason); `false` if there is none.
    async fn set_enabled(
        &self,
        id: &str,
        enabled: bool,
        reason: Option<&str>,
    ) -> anyhow::Result<bool>;
    /// Takes or renews the sink's lease for `owner` until `now + ttl`: the fence to write with
    /// and the cursor to start after, or `None` while another owner's lease runs or the sink is
    /// disabled or gone. Taking it from another owner raises the fence.
    async fn lease(
        &self,
        id: &str,
        owner: &str,
        now: i64,
        ttl: Duration,
    ) -> anyhow::Result<Option<(i64, u64)>>;
    /// Gives the lease up (at shutdown), so another instance takes over at once.
    async fn release(&self, id: &str, owner: &str) -> anyhow::Result<()>;
    /// Moves the cursor forward and writes the batch's dead letters, under `fence`, in one
    /// transaction; `false` when the fence is no longer the sink's (nothing written).
    async fn advance(&self, id: &str, fence: i64, p: &Progress) -> anyhow::Result<bool>;
    /// Notes a failed attempt (`failures`, `last_error`, `failing_since`) under `fence`.
    async fn failed(&self, id: &str, fence: i64, error: &str, now: i64) -> anyhow::Result<()>;
    /// Up to `limit` dead letters, oldest first; only those marked for replay with `replay`.
    async fn dead_letters(
        &self,
        id: &str,
        replay: bool,
        limit: u32,
    ) -> anyhow::Result<Vec<DeadLetter>>;
    /// Marks every dead letter of the sink for replay; how many.
    async fn replay(&self, id: &str) -> anyhow::Result<u64>;
    /// Removes the dead letters at `pos` a replay delivered, under `fence`.
    async fn replayed(&self, id: &str, fence: i64, pos: &[i64]) -> anyhow::Result<()>;
}

/// The statements of [`SinkStore`], written once with PostgreSQL's `$N` placeholders; SQLite
/// reads the same numbered as `?N` ([`sqlite_params`]).
pub mod sql {
    pub const LIST: &str = "SELECT s.id, s.kind, s.target, s.subject, s.secret, s.origin, \
         s.description, s.enabled, s.disabled_reason, s.cursor, s.created_at, s.lease_owner, \
         s.lease_until, s.delivered, s.failures, s.failing_since, s.last_error, \
         s.last_delivered_at, s.lost, \
         (SELECT COUNT(*) FROM sink_dead_letters d WHERE d.sink_id = s.id) AS dead_letters \
         FROM sinks s";
    pub const INSERT: &str = "INSERT INTO sinks \
         (id, kind, target, subject, secret, origin, description, cursor, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (id) DO UPDATE SET target = excluded.target, subject = excluded.subject, \
         secret = excluded.secret, description = excluded.description \
         WHERE sinks.origin = 'flag' AND excluded.origin = 'flag'";
    pub const DELETE: &str = "DELETE FROM sinks WHERE id = $1";
    pub const DELETE_DEAD: &str = "DELETE FROM sink_dead_letters WHERE sink_id = $1";
    pub const ENABLE: &str = "UPDATE sinks SET enabled = $2, disabled_reason = $3, \
         failing_since = CASE WHEN $2 = 1 THEN NULL ELSE failing_since END WHERE id = $1";
    /// Held by `owner` already (keeps the fence), or free, or expired (raises it).
    pub const LEASE: &str = "UPDATE sinks SET \
         fence = CASE WHEN lease_owner = $2 THEN fence ELSE fence + 1 END, \
         lease_owner = $2, lease_until = $3 + $4 \
         WHERE id = $1 AND enabled = 1 \
           AND (lease_owner IS NULL OR lease_owner = $2 OR lease_until < $3) \
         RETURNING fence, cursor";
    pub const RELEASE: &str =
        "UPDATE sinks SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2";
    pub const ADVANCE: &str = "UPDATE sinks SET cursor = $3, delivered = delivered + $4, \
         lost = lost + $5, last_delivered_at = COALESCE($6, last_delivered_at), \
         failing_since = CASE WHEN $7 = 1 THEN NULL ELSE failing_since END \
         WHERE id = $1 AND fence = $2";
    pub const DEAD: &str = "INSERT INTO sink_dead_letters \
         (sink_id, pos, event_id, body, attempts, last_error, dead_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (sink_id, pos) DO UPDATE SET attempts = sink_dead_letters.attempts \
         + excluded.attempts, last_error = excluded.last_error, dead_at = excluded.dead_at, \
         replay = 0";
    pub const FAILED: &str = "UPDATE sinks SET failures = failures + 1, last_error = $3, \
         failing_since = COALESCE(failing_since, $4) WHERE id = $1 AND fence = $2";
    pub const DEAD_LIST: &str = "SELECT pos, event_id, body, attempts, last_error, dead_at \
         FROM sink_dead_letters WHERE sink_id = $1 AND replay >= $2 ORDER BY pos LIMIT $3";
    pub const REPLAY: &str = "UPDATE sink_dead_letters SET replay = 1 WHERE sink_id = $1";
    pub const REPLAYED: &str = "DELETE FROM sink_dead_letters WHERE sink_id = $1 AND pos = $2 \
         AND EXISTS (SELECT 1 FROM sinks WHERE id = $1 AND fence = $3)";
}

/// A statement of [`sql`] with SQLite's numbered placeholders.
pub fn sqlite_params(sql: &str) -> String {
    sql.replace('$', "?")
}

/// Micros of a lease's length.
pub fn ttl_micros(ttl: Duration) -> i64 {
    ttl.as_micros().min(i64::MAX as u128) as i64
}
