-- Waiting rooms (docs/WAITING_ROOM.md). A campaign's room settings are part of its immutable
-- definition (`waiting_room`, JSON, NULL = no room). `room_key` holds the deployment's secret
-- for tickets and the pre-queue's shuffle: drawn once, never changed, so tickets issued before
-- a restart stay valid and a restarted server draws the same order. `room_members` holds every
-- join, in arrival order (`seq`), with its time (µs): a room's whole state is a function of
-- these rows and the secret, so nothing else about a room needs to be written.
ALTER TABLE campaigns ADD COLUMN waiting_room TEXT;

CREATE TABLE room_key (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    key BLOB NOT NULL CHECK (length(key) = 32)
);

CREATE TABLE room_members (
    campaign_id TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    joined_at   INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, user_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX room_members_by_seq ON room_members (campaign_id, seq);

-- The feed's campaign events show the room as GET /v1/campaigns/{id} does.
DROP TRIGGER feed_campaign_created;
DROP TRIGGER feed_campaign_restocked;
DROP TRIGGER feed_campaign_status;

CREATE TRIGGER feed_campaign_created AFTER INSERT ON campaigns
BEGIN
    INSERT INTO feed (type, at, campaign_id, body)
    VALUES ('campaign.created', new.created_at, new.id, json_object(
        'id', new.id, 'kind', new.kind, 'total', new.total, 'live', new.live_units,
        'pending', 0, 'per_user_limit', new.per_user_limit, 'status', new.status,
        'starts_at', new.starts_at, 'ends_at', new.ends_at, 'hold_seconds', new.hold_seconds,
        'waiting_room', json(new.waiting_room)));
END;

CREATE TRIGGER feed_campaign_restocked AFTER UPDATE OF total ON campaigns
WHEN new.total > old.total
BEGIN
    INSERT INTO feed (type, at, campaign_id, body)
    VALUES ('campaign.restocked',
            CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER), new.id,
            json_object(
        'id', new.id, 'kind', new.kind, 'total', new.total, 'live', new.live_units,
        'pending', (SELECT COALESCE(SUM(qty), 0) FROM orders INDEXED BY orders_pending
                     WHERE campaign_id = new.id AND state = 'pending'),
        'per_user_limit', new.per_user_limit, 'status', new.status,
        'starts_at', new.starts_at, 'ends_at', new.ends_at, 'hold_seconds', new.hold_seconds,
        'waiting_room', json(new.waiting_room)));
END;

CREATE TRIGGER feed_campaign_status AFTER UPDATE OF status ON campaigns
WHEN new.status <> old.status
BEGIN
    INSERT INTO feed (type, at, campaign_id, body)
    VALUES (CASE new.status WHEN 'paused' THEN 'campaign.paused'
                            WHEN 'active' THEN 'campaign.resumed'
                            ELSE 'campaign.closed' END,
            CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER), new.id,
            json_object(
        'id', new.id, 'kind', new.kind, 'total', new.total, 'live', new.live_units,
        'pending', (SELECT COALESCE(SUM(qty), 0) FROM orders INDEXED BY orders_pending
                     WHERE campaign_id = new.id AND state = 'pending'),
        'per_user_limit', new.per_user_limit, 'status', new.status,
        'starts_at', new.starts_at, 'ends_at', new.ends_at, 'hold_seconds', new.hold_seconds,
        'waiting_room', json(new.waiting_room)));
END;
