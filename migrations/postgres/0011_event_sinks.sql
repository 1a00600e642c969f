-- Where the event feed is delivered (webhook endpoints, NATS JetStream subjects) and how far
-- each delivery got. One row per sink; `cursor` is the last feed position the sink received
-- (every event at or before it was delivered or dead-lettered), moved only forward and only by
-- the holder of the sink's lease (`fence`), so an instance that lost the lease cannot move it.
-- Times are microseconds since the epoch, as the SQLite ledger keeps them, so both ledgers run
-- the same statements.
CREATE TABLE sinks (
    id              TEXT PRIMARY KEY,
    kind            TEXT NOT NULL CHECK (kind IN ('webhook', 'nats')),
    target          TEXT NOT NULL,
    subject         TEXT,
    secret          TEXT,
    origin          TEXT NOT NULL CHECK (origin IN ('flag', 'api')),
    description     TEXT,
    enabled         BIGINT NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    disabled_reason TEXT,
    cursor          BIGINT NOT NULL CHECK (cursor >= 0),
    created_at      BIGINT NOT NULL,
    lease_owner     TEXT,
    lease_until     BIGINT,
    fence           BIGINT NOT NULL DEFAULT 0 CHECK (fence >= 0),
    delivered       BIGINT NOT NULL DEFAULT 0,
    failures        BIGINT NOT NULL DEFAULT 0,
    failing_since   BIGINT,
    last_error      TEXT,
    last_delivered_at BIGINT,
    lost            BIGINT NOT NULL DEFAULT 0
);

-- A cursor never goes back: a write that would move it back is refused, whoever sends it.
CREATE FUNCTION seckill_sink_cursor_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.cursor < OLD.cursor THEN
        RAISE EXCEPTION 'a sink''s cursor never moves back (% to %)', OLD.cursor, NEW.cursor;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sinks_cursor_forward BEFORE UPDATE OF cursor ON sinks
    FOR EACH ROW EXECUTE FUNCTION seckill_sink_cursor_forward();

-- Events of a sink that no longer hold its cursor back but are not delivered yet: one the
-- receiver refused while it took others ('retrying', with its next attempt), the events of the
-- same order behind it (`lane`: sent only after it, in order), and those given up on after
-- --webhook-max-age ('dead', kept for a replay, with every later event of their order). Each
-- is kept with the exact body sent.
CREATE TABLE sink_parked (
    sink_id          TEXT NOT NULL,
    pos              BIGINT NOT NULL,
    event_id         TEXT NOT NULL,
    lane             TEXT NOT NULL,
    body             TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('retrying', 'dead')),
    attempts         BIGINT NOT NULL CHECK (attempts >= 0),
    first_attempt_at BIGINT NOT NULL,
    next_attempt_at  BIGINT NOT NULL,
    last_error       TEXT NOT NULL,
    PRIMARY KEY (sink_id, pos)
);
CREATE INDEX sink_parked_lane ON sink_parked (sink_id, lane, pos);
