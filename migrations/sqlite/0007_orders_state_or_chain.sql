-- The orders state CHECK as an OR chain, not `state IN (…)`: SQLite evaluates a CHECK with an
-- IN list of more than two values by building a temporary b-tree of the list in every INSERT
-- and UPDATE statement (OpenEphemeral: a b-tree opened and a page zeroed, several thousand
-- instructions per statement on the claim's commit path). SQLite cannot change a CHECK in
-- place, so the table is rebuilt as 0006 built it, with the new CHECK.
--
-- A ledger migrated by a build whose 0006 already carried the OR chain (that file was edited
-- after it had been committed; it is back to its first bytes now, and the ledger accepts the
-- edited file's checksum for version 6, see `ledger::migrations`) is rebuilt the same way:
-- same columns, same rows, same CHECK.
CREATE TABLE orders_v7 (
    campaign_id  TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    order_id     TEXT NOT NULL CHECK (order_id = campaign_id || '-' || seq),
    user_id      TEXT NOT NULL,
    qty          INTEGER NOT NULL CHECK (qty >= 1),
    codes        TEXT,            -- JSON array, code campaigns only
    state        TEXT NOT NULL
                 CHECK (state = 'active' OR state = 'pending' OR state = 'confirmed'
                        OR state = 'expired' OR state = 'cancelled'),
    created_at   INTEGER NOT NULL,
    cancelled_at INTEGER,
    pay_by       INTEGER,         -- campaigns with holds: the confirm's deadline
    resolved_at  INTEGER,         -- when a pending order became confirmed or expired
    PRIMARY KEY (campaign_id, seq)
) WITHOUT ROWID;
INSERT INTO orders_v7 (campaign_id, seq, order_id, user_id, qty, codes, state, created_at,
                       cancelled_at, pay_by, resolved_at)
    SELECT campaign_id, seq, order_id, user_id, qty, codes, state, created_at, cancelled_at,
           pay_by, resolved_at
    FROM orders ORDER BY campaign_id, seq;
DROP TABLE orders;
ALTER TABLE orders_v7 RENAME TO orders;
CREATE INDEX orders_pending ON orders (campaign_id, seq) WHERE state = 'pending';
