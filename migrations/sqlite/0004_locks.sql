-- Leases of the embedded lock service (`seckill::lock`). One row per lock name, kept forever:
-- `fence` only ever grows, so a grant after a restart still gets a fence higher than every
-- fence handed out before. The holder (token, owner, expiry in ms since the Unix epoch) is kept
-- in the same row, so a lease also survives a restart of the server.
CREATE TABLE IF NOT EXISTS lock_fences (
    name        TEXT    PRIMARY KEY,
    fence       INTEGER NOT NULL,
    token       TEXT,
    owner       TEXT,
    expires_ms  INTEGER NOT NULL DEFAULT 0
);
