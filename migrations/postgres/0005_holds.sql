-- Order holds (docs/HOLDS.md): a campaign may give its orders hold_seconds to be confirmed;
-- such orders are written 'pending' with pay_by and end 'confirmed' or 'expired' (resolved_at)
-- unless cancelled. In the scale-out deployment Redis decides every resolution and the order
-- pipeline applies it here in stream order. Same columns and meaning as SQLite's 0005.
ALTER TABLE campaigns ADD COLUMN hold_seconds INTEGER CHECK (hold_seconds BETWEEN 1 AND 86400);

ALTER TABLE orders DROP CONSTRAINT orders_state_check;
ALTER TABLE orders ADD CONSTRAINT orders_state_check
    CHECK (state IN ('active', 'pending', 'confirmed', 'expired', 'cancelled'));
ALTER TABLE orders ADD COLUMN pay_by BIGINT;       -- campaigns with holds: the confirm's deadline
ALTER TABLE orders ADD COLUMN resolved_at BIGINT;  -- when a pending order became confirmed or expired

-- Only pending orders: a rebuild reads them with their deadlines without scanning the rest.
CREATE INDEX orders_pending ON orders (campaign_id, seq) WHERE state = 'pending';
