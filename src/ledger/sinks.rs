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
    pub retrying: i64,
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

/// An event of a sink set aside from its cursor, with the exact body sent. Only a lane's first
/// row's state counts: `retrying` (due at `next_attempt_at`) or `dead`; the rows behind it
/// wait for it, and are dead letters while a row of their lane is dead.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Parked {
    pub pos: i64,
    pub event_id: String,
    /// The order id (the campaign id for a campaign event): its events go in order.
    pub lane: String,
    pub body: String,
    /// `retrying` or `dead`.
    pub state: String,
    pub attempts: i64,
    pub first_attempt_at: i64,
    pub next_attempt_at: i64,
    pub last_error: String,
}

/// What one delivered batch moves: the cursor, the counts, the events set aside.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub cursor: u64,
    pub delivered: u64,
    /// Events retention removed before this sink received them.
    pub lost: u64,
    pub parked: Vec<Parked>,
    /// Micros of the batch's last delivery, if any.
    pub delivered_at: Option<i64>,
}

/// How a retry of a parked event ended.
#[derive(Debug, Clone)]
pub enum Retried {
    /// Taken: removed, and the next event of its lane is due now.
    Taken { pos: i64, lane: String, at: i64 },
    /// Refused again: its next attempt.
    Failed {
        pos: i64,
        attempts: i64,
        next_attempt_at: i64,
        error: String,
    },
    /// Given up: the lane's events are dead from this one on.
    Dead { lane: String, error: String },
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
    /// Removes a sink and its parked events; `false` if there was none.
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
    /// Moves the cursor forward and writes the batch's parked events, under `fence`, in one
    /// transaction; `false` when the fence is no longer the sink's (nothing written).
    async fn advance(&self, id: &str, fence: i64, p: &Progress) -> anyhow::Result<bool>;
    /// Notes a failed attempt (`failures`, `last_error`, `failing_since`) under `fence`.
    async fn failed(&self, id: &str, fence: i64, error: &str, now: i64) -> anyhow::Result<()>;
    /// The lanes with parked events and whether any of them is dead.
    async fn parked_lanes(&self, id: &str) -> anyhow::Result<Vec<(String, bool)>>;
    /// The first parked event of each lane whose retry is due at `now`, oldest first.
    async fn due(&self, id: &str, now: i64, limit: u32) -> anyhow::Result<Vec<Parked>>;
    /// Records a retry's outcome under `fence`; `false` when the fence is no longer the sink's.
    async fn retried(&self, id: &str, fence: i64, r: &Retried, now: i64) -> anyhow::Result<bool>;
    /// Up to `limit` dead letters, oldest first.
    async fn dead_letters(&self, id: &str, limit: u32) -> anyhow::Result<Vec<Parked>>;
    /// Makes every dead letter of the sink retrying again, due at `now`; how many.
    async fn replay(&self, id: &str, now: i64) -> anyhow::Result<u64>;
}

/// The statements of [`SinkStore`], written once with PostgreSQL's `$N` placeholders; SQLite
/// reads the same numbered as `?N` ([`sqlite_params`]).
pub mod sql {
    pub const LIST: &str = "SELECT s.id, s.kind, s.target, s.subject, s.secret, s.origin, \
         s.description, s.enabled, s.disabled_reason, s.cursor, s.created_at, s.lease_owner, \
         s.lease_until, s.delivered, s.failures, s.failing_since, s.last_error, \
         s.last_delivered_at, s.lost, \
         (SELECT COUNT(*) FROM sink_parked d WHERE d.sink_id = s.id AND d.lane IN \
           (SELECT x.lane FROM sink_parked x WHERE x.sink_id = s.id AND x.state = 'dead')) \
           AS dead_letters, \
         (SELECT COUNT(*) FROM sink_parked d WHERE d.sink_id = s.id AND d.lane NOT IN \
           (SELECT x.lane FROM sink_parked x WHERE x.sink_id = s.id AND x.state = 'dead')) \
           AS retrying \
         FROM sinks s";
    /// A new sink's fence starts at its creation time, so a sink removed and added again
    /// under the same id never hands out a fence its removed namesake had.
    pub const INSERT: &str = "INSERT INTO sinks \
         (id, kind, target, subject, secret, origin, description, cursor, created_at, fence) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) \
         ON CONFLICT (id) DO UPDATE SET target = excluded.target, subject = excluded.subject, \
         secret = excluded.secret, description = excluded.description \
         WHERE sinks.origin = 'flag' AND excluded.origin = 'flag'";
    pub const DELETE: &str = "DELETE FROM sinks WHERE id = $1";
    pub const DELETE_PARKED: &str = "DELETE FROM sink_parked WHERE sink_id = $1";
    pub const ENABLE: &str = "UPDATE sinks SET enabled = $2, disabled_reason = $3, \
         failing_since = CASE WHEN $2 = 1 THEN NULL ELSE failing_since END WHERE id = $1";
    /// Held by `owner` already (keeps the fence), or free, or expired (raises it). `$3` is
    /// now, `$4` the lease's length.
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
    pub const PARK: &str = "INSERT INTO sink_parked \
         (sink_id, pos, event_id, lane, body, state, attempts, first_attempt_at, \
          next_attempt_at, last_error) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
    pub const FAILED: &str = "UPDATE sinks SET failures = failures + 1, last_error = $3, \
         failing_since = COALESCE(failing_since, $4) WHERE id = $1 AND fence = $2";
    pub const FENCED: &str = "SELECT COUNT(*) FROM sinks WHERE id = $1 AND fence = $2";
    pub const LANES: &str = "SELECT lane, MAX(CASE WHEN state = 'dead' THEN 1 ELSE 0 END) \
         FROM sink_parked WHERE sink_id = $1 GROUP BY lane";
    pub const DUE: &str = "SELECT pos, event_id, lane, body, state, attempts, first_attempt_at, \
         next_attempt_at, last_error FROM sink_parked p \
         WHERE p.sink_id = $1 AND p.state = 'retrying' AND p.next_attempt_at <= $2 \
           AND p.pos = (SELECT MIN(q.pos) FROM sink_parked q \
                         WHERE q.sink_id = p.sink_id AND q.lane = p.lane) \
         ORDER BY p.pos LIMIT $3";
    pub const TAKEN: &str = "DELETE FROM sink_parked WHERE sink_id = $1 AND pos = $2";
    pub const NEXT_DUE: &str = "UPDATE sink_parked SET next_attempt_at = $3, state = 'retrying', \
         first_attempt_at = CASE WHEN attempts = 0 THEN $3 ELSE first_attempt_at END \
         WHERE sink_id = $1 AND pos = (SELECT MIN(pos) FROM sink_parked \
                                        WHERE sink_id = $1 AND lane = $2)";
    pub const TOOK: &str = "UPDATE sinks SET delivered = delivered + 1, last_delivered_at = $2, \
         failing_since = NULL WHERE id = $1";
    pub const REFUSED: &str = "UPDATE sink_parked SET attempts = $3, next_attempt_at = $4, \
         last_error = $5 WHERE sink_id = $1 AND pos = $2";
    pub const DEAD: &str = "UPDATE sink_parked SET state = 'dead', last_error = \
         CASE WHEN attempts > 0 THEN $3 ELSE 'behind a dead letter of its order' END \
         WHERE sink_id = $1 AND lane = $2";
    /// A lane is dead while a row of it is (its first row died, and took the rows parked
    /// behind it then): every row of such a lane is a dead letter, including those parked
    /// behind it later, whatever state they were written with.
    pub const DEAD_LIST: &str = "SELECT pos, event_id, lane, body, 'dead' AS state, attempts, \
         first_attempt_at, next_attempt_at, last_error FROM sink_parked \
         WHERE sink_id = $1 AND lane IN \
           (SELECT x.lane FROM sink_parked x WHERE x.sink_id = $1 AND x.state = 'dead') \
         ORDER BY pos LIMIT $2";
    pub const REPLAY: &str = "UPDATE sink_parked SET state = 'retrying', next_attempt_at = $2, \
         first_attempt_at = $2 WHERE sink_id = $1 AND state = 'dead'";
}

/// A statement of [`sql`] with SQLite's numbered placeholders. Only for the constants of
/// [`sql`] (and SQL made of them alone): its answer is marked safe to run as it is.
pub fn sqlite_params(sql: &str) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(sql.replace('$', "?"))
}

/// Micros of a lease's length.
pub fn ttl_micros(ttl: Duration) -> i64 {
    ttl.as_micros().min(i64::MAX as u128) as i64
}
