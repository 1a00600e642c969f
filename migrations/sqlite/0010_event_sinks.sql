-- Where the event feed is delivered (webhook endpoints, NATS JetStream subjects) and how far
-- each delivery got. One row per sink; `cursor` is the last feed position the sink received
-- (every event at or before it was delivered or dead-lettered), moved only forward and only by
-- the holder of the sink's lease (`fence`), so a deliverer that lost its lease cannot move it.
-- Times are microseconds since the epoch, as everywhere in this ledger.
CREATE TABLE sinks (
    id              TEXT PRIMARY KEY,
    kind            TEXT NOT NULL CHECK (kind IN ('webhook', 'nats')),
    target          TEXT NOT NULL,
    subject         TEXT,
    secret          TEXT,
    origin          TEXT NOT NULL CHECK (origin IN ('flag', 'api')),
    description     TEXT,
    enabled         INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    disabled_reason TEXT,
    cursor          INTEGER NOT NULL CHECK (cursor >= 0),
    created_at      INTEGER NOT NULL,
    lease_owner     TEXT,
    lease_until     INTEGER,
    fence           INTEGER NOT NULL DEFAULT 0 CHECK (fence >= 0),
    delivered       INTEGER NOT NULL DEFAULT 0,
    failures        INTEGER NOT NULL DEFAULT 0,
    failing_since   INTEGER,
    last_error      TEXT,
    last_delivered_at INTEGER,
    lost            INTEGER NOT NULL DEFAULT 0
);

-- A cursor never goes back: a write that would move it back is refused, whoever sends it.
CREATE TRIGGER sinks_cursor_forward BEFORE UPDATE OF cursor ON sinks
WHEN NEW.cursor < OLD.cursor
BEGIN
    SELECT RAISE(ABORT, 'a sink''s cursor never moves back');
END;

-- Events of a sink that no longer hold its cursor back but are not delivered yet: one the
-- receiver refused while it took others ('retrying', with its next attempt), the events of the
-- same order behind it (`lane`: sent only after it, in order), and those given up on after
-- --webhook-max-age ('dead', kept for a replay, with every later event of their order). Each
-- is kept with the exact body sent.
CREATE TABLE sink_parked (
    sink_id          TEXT NOT NULL,
    pos              INTEGER NOT NULL,
    event_id         TEXT NOT NULL,
    lane             TEXT NOT NULL,
    body             TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('retrying', 'dead')),
    attempts         INTEGER NOT NULL CHECK (attempts >= 0),
    first_attempt_at INTEGER NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    last_error       TEXT NOT NULL,
    PRIMARY KEY (sink_id, pos)
);
CREATE INDEX sink_parked_lane ON sink_parked (sink_id, lane, pos);
