-- The event feed (docs/EVENTS.md): every order transition and campaign change, written in the
-- very transaction that makes it, so no change commits without its event and no event exists
-- for a change that rolled back. The ledger's one writer writes the `order.won` events with the
-- orders it inserts (it is their only inserter: one multi-row INSERT per batch, as the live
-- counts of 0008 are kept, instead of a trigger program per order); triggers write the rest.
--
-- pos is the feed's cursor. The embedded ledger has one writer, so transactions commit in the
-- order they take positions; AUTOINCREMENT never hands out a position twice (not even after the
-- newest events were pruned), and a rolled-back transaction gives its positions back, so a
-- reader that follows pos > cursor sees every event, in commit order, without gaps.
--
-- An order event keeps only the order's (campaign_id, seq): every column the order shows after
-- one of its transitions is written once and never changed (its state after the transition is
-- the event's type), so the server renders it from the order's row, and a win costs one small
-- row. A campaign event keeps the campaign as it stood after the change (body, JSON, with its
-- units in live and pending orders). at is microseconds since the epoch: the transition's own
-- time for an order, the ledger's clock for a campaign change; written_at is when the ledger
-- wrote the event, which retention goes by.
CREATE TABLE feed (
    pos         INTEGER PRIMARY KEY AUTOINCREMENT,
    type        TEXT NOT NULL,
    at          INTEGER NOT NULL,
    campaign_id TEXT NOT NULL,
    seq         INTEGER,
    body        TEXT,
    written_at  INTEGER NOT NULL
                DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)),
    CHECK ((seq IS NULL) <> (body IS NULL))
);
CREATE INDEX feed_by_campaign ON feed (campaign_id, pos);

-- Retention removes a prefix of positions; `through` is the last one removed, so a cursor
-- below it is known to have missed events (410) and one at or above it is not.
CREATE TABLE feed_pruned (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    through INTEGER NOT NULL
);
INSERT INTO feed_pruned (singleton, through) VALUES (1, 0);

-- confirmed, expired, cancelled (orders_state_once allows no other change of state).
CREATE TRIGGER feed_order_moved AFTER UPDATE OF state ON orders
WHEN old.state <> new.state
BEGIN
    INSERT INTO feed (type, at, campaign_id, seq)
    VALUES ('order.' || new.state,
            COALESCE(CASE new.state WHEN 'cancelled' THEN new.cancelled_at
                                    ELSE new.resolved_at END,
                     CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)),
            new.campaign_id, new.seq);
END;

CREATE TRIGGER feed_campaign_created AFTER INSERT ON campaigns
BEGIN
    INSERT INTO feed (type, at, campaign_id, body)
    VALUES ('campaign.created', new.created_at, new.id, json_object(
        'id', new.id, 'kind', new.kind, 'total', new.total, 'live', new.live_units,
        'pending', 0, 'per_user_limit', new.per_user_limit, 'status', new.status,
        'starts_at', new.starts_at, 'ends_at', new.ends_at, 'hold_seconds', new.hold_seconds));
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
        'starts_at', new.starts_at, 'ends_at', new.ends_at, 'hold_seconds', new.hold_seconds));
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
        'starts_at', new.starts_at, 'ends_at', new.ends_at, 'hold_seconds', new.hold_seconds));
END;
