-- The ledger refuses what the guarantees forbid, in the transaction that writes it (the rules
-- of PostgreSQL's migration 0007, see ledger::invariants): a campaign's live units (active,
-- pending, confirmed) never exceed its total; a buyer's live units never exceed the per-user
-- limit; a code is held by at most one live order; an order leaves `pending` once and a final
-- state never changes (active or confirmed -> cancelled is the one later change). The engine
-- decides every claim in memory; a write these rules refuse means its memory contradicts the
-- ledger, and it re-reads its state (WriteFault::Diverged).
--
-- New orders are counted by the ledger writer, once per batch (ledger::sqlite_live: one UPDATE
-- of campaigns.live_units guarded by the total per campaign, a multi-row upsert of holdings
-- whose CHECK holds each buyer to the limit, the codes into live_codes): a row trigger per
-- inserted order cost half as much again as the whole durable win. Changes of state (cancel,
-- confirm, expiry) and deletes are rare and counted by the triggers below. The writer is the
-- only one that inserts orders; a migration that copies the orders table must keep the counts.
--
-- Totals and limits are checked where units are added, never where they go back: a ledger
-- oversold before this migration still starts (the backfill keeps the first live holder of a
-- code held twice, and a buyer above the limit until they buy again) and can be cancelled back.

ALTER TABLE campaigns ADD COLUMN live_units INTEGER NOT NULL DEFAULT 0;

-- cap is the campaign's per-user limit (written with every new order), so that a CHECK of
-- the row holds the buyer to it.
CREATE TABLE holdings (
    campaign_id TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    units       INTEGER NOT NULL,
    cap         INTEGER NOT NULL,
    PRIMARY KEY (campaign_id, user_id),
    CONSTRAINT holdings_within_limit CHECK (units <= cap),
    CONSTRAINT holdings_not_negative CHECK (units >= 0)
) WITHOUT ROWID;

CREATE TABLE live_codes (
    campaign_id TEXT NOT NULL,
    code        TEXT NOT NULL,
    order_id    TEXT NOT NULL,
    PRIMARY KEY (campaign_id, code)
) WITHOUT ROWID;

UPDATE campaigns SET live_units = (
    SELECT ifnull(SUM(qty), 0) FROM orders
     WHERE orders.campaign_id = campaigns.id
       AND (state = 'active' OR state = 'pending' OR state = 'confirmed'));
INSERT INTO holdings (campaign_id, user_id, units, cap)
SELECT o.campaign_id, o.user_id, SUM(o.qty), MAX(c.per_user_limit, SUM(o.qty))
  FROM orders o, campaigns c
 WHERE c.id = o.campaign_id AND (o.state = 'active' OR o.state = 'pending' OR o.state = 'confirmed')
 GROUP BY o.campaign_id, o.user_id;
INSERT OR IGNORE INTO live_codes (campaign_id, code, order_id)
SELECT o.campaign_id, j.value, o.order_id FROM orders o, json_each(o.codes) j
 WHERE o.codes IS NOT NULL AND (o.state = 'active' OR o.state = 'pending' OR o.state = 'confirmed')
 ORDER BY o.campaign_id, o.seq;

CREATE TRIGGER orders_state_once BEFORE UPDATE OF state ON orders
WHEN old.state <> new.state
 AND NOT (old.state = 'pending' AND (new.state = 'confirmed' OR new.state = 'expired' OR new.state = 'cancelled'))
 AND NOT ((old.state = 'active' OR old.state = 'confirmed') AND new.state = 'cancelled')
BEGIN
    SELECT RAISE(ABORT, 'order_state_once: an order leaves pending once, and a final state stays');
END;

CREATE TRIGGER orders_live_release AFTER UPDATE OF state ON orders
WHEN (old.state = 'active' OR old.state = 'pending' OR old.state = 'confirmed')
 AND NOT (new.state = 'active' OR new.state = 'pending' OR new.state = 'confirmed')
BEGIN
    UPDATE campaigns SET live_units = live_units - old.qty WHERE id = old.campaign_id;
    UPDATE holdings SET units = units - old.qty
     WHERE campaign_id = old.campaign_id AND user_id = old.user_id;
    DELETE FROM live_codes WHERE campaign_id = old.campaign_id AND order_id = old.order_id
       AND code IN (SELECT value FROM json_each(old.codes));
END;

CREATE TRIGGER orders_live_delete AFTER DELETE ON orders
WHEN old.state = 'active' OR old.state = 'pending' OR old.state = 'confirmed'
BEGIN
    UPDATE campaigns SET live_units = live_units - old.qty WHERE id = old.campaign_id;
    UPDATE holdings SET units = units - old.qty
     WHERE campaign_id = old.campaign_id AND user_id = old.user_id;
    DELETE FROM live_codes WHERE campaign_id = old.campaign_id AND order_id = old.order_id;
END;
