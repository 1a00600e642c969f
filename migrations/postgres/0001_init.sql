-- seckill ledger, PostgreSQL flavour (scale-out deployment). Same tables and meaning as the
-- SQLite schema; times are microseconds since the Unix epoch (UTC).

CREATE TABLE campaigns (
    id             TEXT PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN ('stock', 'codes')),
    total          BIGINT NOT NULL CHECK (total >= 0),
    per_user_limit BIGINT NOT NULL CHECK (per_user_limit >= 1),
    status         TEXT NOT NULL CHECK (status IN ('active', 'paused', 'closed')),
    starts_at      BIGINT,
    ends_at        BIGINT,
    created_at     BIGINT NOT NULL
);

-- Every code a code campaign ever had; pos keeps the hand-out order.
CREATE TABLE campaign_codes (
    campaign_id TEXT NOT NULL,
    code        TEXT NOT NULL,
    pos         BIGINT NOT NULL,
    PRIMARY KEY (campaign_id, code)
);
CREATE INDEX campaign_codes_by_pos ON campaign_codes (campaign_id, pos);

CREATE TABLE orders (
    order_id     TEXT PRIMARY KEY,
    campaign_id  TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    user_id      TEXT NOT NULL,
    qty          BIGINT NOT NULL CHECK (qty >= 1),
    codes        TEXT,            -- JSON array, code campaigns only
    state        TEXT NOT NULL CHECK (state IN ('active', 'cancelled')),
    created_at   BIGINT NOT NULL,
    cancelled_at BIGINT
);
CREATE UNIQUE INDEX orders_by_campaign ON orders (campaign_id, seq);
CREATE INDEX orders_by_user ON orders (campaign_id, user_id, seq);

-- First processed answer per (campaign, user, Idempotency-Key). The scale-out deployment keeps
-- these in Redis; the table exists so both ledgers accept the same writes.
CREATE TABLE idempotency (
    campaign_id TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    key         TEXT NOT NULL,
    answer      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (campaign_id, user_id, key)
);
CREATE INDEX idempotency_by_age ON idempotency (created_at);

-- Audit trail of admin state changes.
CREATE TABLE events (
    id          BIGSERIAL PRIMARY KEY,
    campaign_id TEXT NOT NULL,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL,
    at          BIGINT NOT NULL
);

-- Orders the pipeline could never persist (poison). Their units, codes and allowance were
-- given back in Redis; the row keeps what the stream carried and why it was refused.
CREATE TABLE failed_orders (
    stream_id   TEXT NOT NULL,
    campaign_id TEXT NOT NULL,
    order_id    TEXT,
    payload     TEXT NOT NULL,    -- the stream entry's fields as JSON
    reason      TEXT NOT NULL,
    at          BIGINT NOT NULL,
    PRIMARY KEY (campaign_id, stream_id)
);
