-- One failed_orders row per refused order, not per stream entry: a batch entry carries the
-- orders of one claims.lua call under one stream id, and with (campaign_id, stream_id) as the
-- key only the first refused order of an entry was recorded (the others were compensated in
-- Redis but their cancel waited for a ledger row that never came). An entry that is poison as
-- a whole (it does not parse) has no order id and keeps one row.
ALTER TABLE failed_orders DROP CONSTRAINT failed_orders_pkey;
CREATE UNIQUE INDEX failed_orders_once
    ON failed_orders (campaign_id, stream_id, COALESCE(order_id, ''));
