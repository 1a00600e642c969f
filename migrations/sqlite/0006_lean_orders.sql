-- A leaner orders table (issue 10, durable wins): every won claim inserts one row, and each
-- B-tree the row lands in is work on the claim's commit path (a leaf to modify, a WAL frame to
-- write). Before, a row went to four: the rowid table, the automatic index of the order_id
-- primary key, orders_by_campaign and orders_by_user (no query of the ledger used the last one:
-- listing filtered by user walks orders_by_campaign). Now the table is clustered on
-- (campaign_id, seq), the only order the ledger reads in, and is the one B-tree a plain order
-- is written to (the partial pending index adds one more for orders with a deadline).
-- order_id stays as a column (it is what every answer carries); it is always
-- `<campaign_id>-<seq>` (domain::parse_order_id accepts no other spelling), which the CHECK
-- keeps true, so a lookup by order id is a lookup by (campaign_id, seq).
CREATE TABLE orders_v6 (
    campaign_id  TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    order_id     TEXT NOT NULL CHECK (order_id = campaign_id || '-' || seq),
    user_id      TEXT NOT NULL,
    qty          INTEGER NOT NULL CHECK (qty >= 1),
    codes        TEXT,            -- JSON array, code campaigns only
    state        TEXT NOT NULL
                 CHECK (state IN ('active', 'pending', 'confirmed', 'expired', 'cancelled')),
    created_at   INTEGER NOT NULL,
    cancelled_at INTEGER,
    pay_by       INTEGER,         -- campaigns with holds: the confirm's deadline
    resolved_at  INTEGER,         -- when a pending order became confirmed or expired
    PRIMARY KEY (campaign_id, seq)
) WITHOUT ROWID;
INSERT INTO orders_v6 (campaign_id, seq, order_id, user_id, qty, codes, state, created_at,
                       cancelled_at, pay_by, resolved_at)
    SELECT campaign_id, seq, order_id, user_id, qty, codes, state, created_at, cancelled_at,
           pay_by, resolved_at
    FROM orders ORDER BY campaign_id, seq;
DROP TABLE orders;
ALTER TABLE orders_v6 RENAME TO orders;
-- Only pending orders: recovery reads them with their deadlines without scanning the rest.
CREATE INDEX orders_pending ON orders (campaign_id, seq) WHERE state = 'pending';
