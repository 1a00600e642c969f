-- Idempotency-Key of admin POSTs (create, restock, pause/resume/close): written in the same
-- transaction as the change it guards. fingerprint is the hex SHA-256 of the request.
CREATE TABLE admin_keys (
    scope       TEXT NOT NULL,
    key         TEXT NOT NULL,
    op          TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX admin_keys_by_age ON admin_keys (created_at);
