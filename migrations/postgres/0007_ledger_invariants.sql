-- The ledger refuses what the guarantees forbid, in the transaction that writes it, whoever
-- writes it (the order pipeline, an admin change, a second deployment with its own Redis
-- sharing this database): a campaign's live units (active, pending and confirmed orders) never
-- exceed its total; a buyer's live units never exceed the campaign's per-user limit; a code is
-- held by at most one live order; an order leaves `pending` once and a final state never
-- changes (cancelled after active or confirmed is the one later change). Before, the gate
-- decided and the ledger wrote down whatever it was handed: a gate that went back in time
-- sold the same units again, and PostgreSQL took them.
--
-- The counts are kept by statement-level triggers on orders (one set of statements per
-- INSERT, UPDATE or DELETE, whatever its number of rows): campaigns.live_units, holdings and
-- live_codes. A refusal is an integrity error (SQLSTATE 23514 or 23505) naming its rule in the
-- constraint: campaign_live_within_total, holdings_within_limit, live_codes_pkey,
-- order_state_once, order_fixed (see ledger::invariants). An order's identity (id, campaign,
-- buyer, quantity, codes) never changes once written.
--
-- The totals and limits are checked where units are added, never where they are given back: a
-- ledger that was oversold before this migration still starts, and an operator can cancel it
-- back within its total (the backfill keeps the first live holder of a code held twice).

ALTER TABLE campaigns ADD COLUMN live_units BIGINT NOT NULL DEFAULT 0;

CREATE TABLE holdings (
    campaign_id TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    units       BIGINT NOT NULL,
    PRIMARY KEY (campaign_id, user_id)
);

CREATE TABLE live_codes (
    campaign_id TEXT NOT NULL,
    code        TEXT NOT NULL,
    order_id    TEXT NOT NULL,
    CONSTRAINT live_codes_pkey PRIMARY KEY (campaign_id, code)
);

UPDATE campaigns c SET live_units = s.units
  FROM (SELECT campaign_id, SUM(qty) AS units FROM orders
         WHERE state IN ('active', 'pending', 'confirmed') GROUP BY campaign_id) s
 WHERE c.id = s.campaign_id;
INSERT INTO holdings (campaign_id, user_id, units)
SELECT campaign_id, user_id, SUM(qty) FROM orders
 WHERE state IN ('active', 'pending', 'confirmed') GROUP BY campaign_id, user_id;
INSERT INTO live_codes (campaign_id, code, order_id)
SELECT o.campaign_id, c.code, o.order_id
  FROM orders o, jsonb_array_elements_text(o.codes::jsonb) AS c(code)
 WHERE o.state IN ('active', 'pending', 'confirmed') AND o.codes IS NOT NULL
 ORDER BY o.campaign_id, o.seq
ON CONFLICT DO NOTHING;

-- Counts never go below zero: a count that drifted shows at once.
ALTER TABLE campaigns ADD CONSTRAINT campaign_live_not_negative CHECK (live_units >= 0);
ALTER TABLE holdings ADD CONSTRAINT holdings_not_negative CHECK (units >= 0);

-- Applies a change of live orders, one array element per order: units > 0 for an order that
-- became live, < 0 for one that stopped being live.
CREATE FUNCTION seckill_live_apply(c_campaign TEXT[], c_user TEXT[], c_order TEXT[],
                                   c_units BIGINT[], c_codes TEXT[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bad RECORD;
BEGIN
    IF cardinality(c_order) = 0 THEN
        RETURN;
    END IF;
    UPDATE campaigns c SET live_units = c.live_units + d.units
      FROM (SELECT campaign_id, SUM(units) AS units
              FROM unnest(c_campaign, c_units) AS x(campaign_id, units)
             GROUP BY campaign_id) d
     WHERE c.id = d.campaign_id AND d.units <> 0;
    SELECT c.id, c.live_units, c.total INTO bad
      FROM campaigns c
      JOIN (SELECT DISTINCT campaign_id FROM unnest(c_campaign, c_units) AS x(campaign_id, units)
             WHERE units > 0) d ON d.campaign_id = c.id
     WHERE c.live_units > c.total
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'campaign % would hold % live units for a total of %',
            bad.id, bad.live_units, bad.total
            USING ERRCODE = 'check_violation', CONSTRAINT = 'campaign_live_within_total';
    END IF;
    -- Units given back update the rows they were counted in; units added are upserted (an
    -- INSERT's CHECK sees the proposed row before its conflict, so it never carries a minus).
    UPDATE holdings h SET units = h.units + d.units
      FROM (SELECT campaign_id, user_id, SUM(units) AS units
              FROM unnest(c_campaign, c_user, c_units) AS x(campaign_id, user_id, units)
             GROUP BY campaign_id, user_id HAVING SUM(units) < 0) d
     WHERE h.campaign_id = d.campaign_id AND h.user_id = d.user_id;
    INSERT INTO holdings AS h (campaign_id, user_id, units)
    SELECT campaign_id, user_id, SUM(units)
      FROM unnest(c_campaign, c_user, c_units) AS x(campaign_id, user_id, units)
     GROUP BY campaign_id, user_id HAVING SUM(units) > 0 ORDER BY campaign_id, user_id
    ON CONFLICT (campaign_id, user_id) DO UPDATE SET units = h.units + excluded.units;
    SELECT h.campaign_id, h.user_id, h.units, c.per_user_limit INTO bad
      FROM unnest(c_campaign, c_user, c_units) AS x(campaign_id, user_id, units)
      JOIN holdings h ON h.campaign_id = x.campaign_id AND h.user_id = x.user_id
      JOIN campaigns c ON c.id = h.campaign_id
     WHERE x.units > 0 AND h.units > c.per_user_limit
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'buyer % would hold % units of campaign % (limit %)',
            bad.user_id, bad.units, bad.campaign_id, bad.per_user_limit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'holdings_within_limit';
    END IF;
    DELETE FROM live_codes l
     USING (SELECT campaign_id, order_id, jsonb_array_elements_text(codes::jsonb) AS code
              FROM unnest(c_campaign, c_order, c_units, c_codes)
                   AS x(campaign_id, order_id, units, codes)
             WHERE units < 0 AND codes IS NOT NULL) d
     WHERE l.campaign_id = d.campaign_id AND l.code = d.code AND l.order_id = d.order_id;
    INSERT INTO live_codes (campaign_id, code, order_id)
    SELECT campaign_id, jsonb_array_elements_text(codes::jsonb), order_id
      FROM unnest(c_campaign, c_order, c_units, c_codes) AS x(campaign_id, order_id, units, codes)
     WHERE units > 0 AND codes IS NOT NULL;
END
$$;

CREATE FUNCTION seckill_orders_live() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad RECORD;
    c_campaign TEXT[];
    c_user TEXT[];
    c_order TEXT[];
    c_units BIGINT[];
    c_codes TEXT[];
BEGIN
    IF TG_OP = 'UPDATE' THEN
        SELECT o.order_id INTO bad
          FROM old_rows o LEFT JOIN new_rows n ON n.order_id = o.order_id
         WHERE n.order_id IS NULL OR n.campaign_id <> o.campaign_id OR n.user_id <> o.user_id
            OR n.qty <> o.qty OR n.codes IS DISTINCT FROM o.codes
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'order % cannot change its id, campaign, buyer, quantity or codes',
                bad.order_id USING ERRCODE = 'check_violation', CONSTRAINT = 'order_fixed';
        END IF;
        SELECT o.order_id, o.state AS was, n.state AS now INTO bad
          FROM old_rows o JOIN new_rows n ON n.order_id = o.order_id
         WHERE o.state <> n.state
           AND NOT (o.state = 'pending' AND n.state IN ('confirmed', 'expired', 'cancelled'))
           AND NOT (o.state IN ('active', 'confirmed') AND n.state = 'cancelled')
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'order % cannot go from % to %', bad.order_id, bad.was, bad.now
                USING ERRCODE = 'check_violation', CONSTRAINT = 'order_state_once';
        END IF;
        SELECT array_agg(n.campaign_id), array_agg(n.user_id), array_agg(n.order_id),
               array_agg(CASE WHEN n.state IN ('active', 'pending', 'confirmed')
                              THEN n.qty ELSE -n.qty END),
               array_agg(n.codes)
          INTO c_campaign, c_user, c_order, c_units, c_codes
          FROM old_rows o JOIN new_rows n ON n.order_id = o.order_id
         WHERE (o.state IN ('active', 'pending', 'confirmed'))
               <> (n.state IN ('active', 'pending', 'confirmed'));
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(campaign_id), array_agg(user_id), array_agg(order_id),
               array_agg(qty), array_agg(codes)
          INTO c_campaign, c_user, c_order, c_units, c_codes
          FROM new_rows WHERE state IN ('active', 'pending', 'confirmed');
    ELSE
        SELECT array_agg(campaign_id), array_agg(user_id), array_agg(order_id),
               array_agg(-qty), array_agg(codes)
          INTO c_campaign, c_user, c_order, c_units, c_codes
          FROM old_rows WHERE state IN ('active', 'pending', 'confirmed');
    END IF;
    IF c_order IS NOT NULL THEN
        PERFORM seckill_live_apply(c_campaign, c_user, c_order, c_units, c_codes);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER orders_live_insert AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_live();
CREATE TRIGGER orders_live_update AFTER UPDATE ON orders
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_live();
CREATE TRIGGER orders_live_delete AFTER DELETE ON orders
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION seckill_orders_live();
