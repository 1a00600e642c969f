-- Order holds (docs/HOLDS.md): a campaign may give its orders hold_seconds to be confirmed;
-- such orders are written 'pending' with pay_by and end 'confirmed' or 'expired' (resolved_at)
-- unless cancelled. SQLite cannot change a CHECK constraint in place, so the orders table is
-- rebuilt with the new states; its rows are copied as they are.
ALTER TABLE campaigns ADD COLUMN hold_seconds INTEGER CHECK (hold_seconds BETWEEN 1 AND 86400);

CREATE TABLE orders_v5 (
    order_id     TEXT PRIMARY KEY,
    campaign_id  TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    user_id      TEXT NOT NULL,
    qty          INTEGER NOT NULL CHECK (qty >= 1),
    codes        TEXT,            -- JSON array, code campaigns only
    state        TEXT NOT NULL
                 CHECK (state IN ('active', 'pending', 'confirmed', 'expired', 'cancelled')),
    created_at   INTEGER NOT NULL,
    cancelled_at INTEGER,
    pay_by       INTEGER,         -- campaigns with holds: the confirm's deadline
    resolved_at  INTEGER          -- when a pending order became confirmed or expired
);
INSERT INTO orders_v5 (order_id, campaign_id, seq, user_id, qty, codes, state, created_at, cancelled_at)
    SELECT order_id, campaign_id, seq, user_id, qty, codes, state, created_at, cancelled_at FROM orders;
DROP TABLE orders;
ALTER TABLE orders_v5 RENAME TO orders;
CREATE UNIQUE INDEX orders_by_campaign ON orders (campaign_id, seq);
CREATE INDEX orders_by_user ON orders (campaign_id, user_id, seq);
-- Only pending orders: recovery reads them with their deadlines without scanning the rest.
CREATE INDEX orders_pending ON orders (campaign_id, seq) WHERE state = 'pending';
