-- seckill ledger, SQLite flavour. Times are microseconds since the Unix epoch (UTC).

CREATE TABLE campaigns (
    id             TEXT PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN ('stock', 'codes')),
    total          INTEGER NOT NULL CHECK (total >= 0),
    per_user_limit INTEGER NOT NULL CHECK (per_user_limit >= 1),
    status         TEXT NOT NULL CHECK (status IN ('active', 'paused', 'closed')),
    starts_at      INTEGER,
    ends_at        INTEGER,
    created_at     INTEGER NOT NULL
);

-- Every code a code campaign ever had; pos keeps the hand-out order.
CREATE TABLE campaign_codes (
    campaign_id TEXT NOT NULL,
    code        TEXT NOT NULL,
    pos         INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, code)
);

CREATE TABLE orders (
    order_id     TEXT PRIMARY KEY,
    campaign_id  TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    user_id      TEXT NOT NULL,
    qty          INTEGER NOT NULL CHECK (qty >= 1),
    codes        TEXT,            -- JSON array, code campaigns only
    state        TEXT NOT NULL CHECK (state IN ('active', 'cancelled')),
    created_at   INTEGER NOT NULL,
    cancelled_at INTEGER
);
CREATE UNIQUE INDEX orders_by_campaign ON orders (campaign_id, seq);
CREATE INDEX orders_by_user ON orders (campaign_id, user_id, seq);

-- First processed answer per (campaign, user, Idempotency-Key).
CREATE TABLE idempotency (
    campaign_id TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    key         TEXT NOT NULL,
    answer      TEXT NOT NULL,    -- JSON of the claim answer
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, user_id, key)
);
CREATE INDEX idempotency_by_age ON idempotency (created_at);

-- Audit trail of admin state changes.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id TEXT NOT NULL,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL,
    at          INTEGER NOT NULL
);
