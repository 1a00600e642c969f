-- The event feed (docs/EVENTS.md): every order transition and campaign change, written by
-- triggers in the very transaction that makes it, whoever writes it (the order pipeline, a
-- hold's resolution, an admin change), so no change exists without its event and no event
-- without its change.
--
-- Positions. Many transactions write here at once, and a sequence hands out numbers in the
-- order transactions ask, not in the order they commit: a reader that trusted `id > cursor`
-- would step over an id whose transaction commits after a higher one became visible. So an
-- event is written without a position (pos NULL), and positions are handed out afterwards,
-- to committed events only, by one numbering transaction at a time (seckill_feed_number, which
-- holds feed_head's row): each numbering takes the next positions after the last and commits
-- them together with feed_head.numbered, so every position up to `numbered` is visible as soon
-- as `numbered` is, and a reader that reads `numbered` first and then the events up to it sees
-- every event, without gaps, in the order they became visible. The events of one order are in
-- the order of its transitions: a later transition's transaction waits for the earlier one's
-- row lock, so it commits, and is numbered, after it.
--
-- An order event keeps only the order's (campaign_id, seq): every column the order shows after
-- one of its transitions is written once and never changed (order_fixed, order_state_once;
-- its state after the transition is the event's type), so the server renders it from the
-- order's row. A campaign event keeps the campaign as it stood after the change (body, with its
-- units in live and pending orders). at is microseconds since the epoch: the transition's own
-- time for an order, the database's clock for a campaign change; numbered_at is when the event
-- became readable, which retention goes by (a win the pipeline writes an hour after Redis
-- decided it is kept as long as any other event).
CREATE TABLE feed (
    id          BIGSERIAL PRIMARY KEY,
    pos         BIGINT UNIQUE,
    type        TEXT NOT NULL,
    at          BIGINT NOT NULL,
    campaign_id TEXT NOT NULL,
    seq         BIGINT,
    body        JSONB,
    numbered_at BIGINT,
    CHECK ((seq IS NULL) <> (body IS NULL))
);
CREATE INDEX feed_unnumbered ON feed (id) WHERE pos IS NULL;
CREATE INDEX feed_by_campaign ON feed (campaign_id, pos);

-- numbered: the last position handed out. pruned_through: the last position retention removed
-- (a cursor below it has missed events: 410).
CREATE TABLE feed_head (
    singleton      BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    numbered       BIGINT NOT NULL,
    pruned_through BIGINT NOT NULL
);
INSERT INTO feed_head (singleton, numbered, pruned_through) VALUES (TRUE, 0, 0);

CREATE FUNCTION seckill_now_micros() RETURNS BIGINT LANGUAGE sql AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::BIGINT
$$;

-- A win; an order written straight into a final state (a resolution that reached the ledger
-- before its order) is a win followed by that transition.
CREATE FUNCTION seckill_feed_orders() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO feed (type, at, campaign_id, seq)
        SELECT e.type, e.at, e.campaign_id, e.seq
          FROM (SELECT 'order.won' AS type, created_at AS at, campaign_id, seq, 0 AS step
                  FROM new_rows
                UNION ALL
                SELECT 'order.' || state, COALESCE(cancelled_at, resolved_at, created_at),
                       campaign_id, seq, 1
                  FROM new_rows WHERE state NOT IN ('active', 'pending')) e
         ORDER BY e.campaign_id, e.seq, e.step;
    ELSE
        INSERT INTO feed (type, at, campaign_id, seq)
        SELECT 'order.' || n.state,
               COALESCE(CASE n.state WHEN 'cancelled' THEN n.cancelled_at ELSE n.resolved_at END,
                        seckill_now_micros()),
               n.campaign_id, n.seq
          FROM old_rows o JOIN new_rows n ON n.order_id = o.order_id
         WHERE o.state <> n.state
         ORDER BY n.campaign_id, n.seq;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER feed_orders_insert AFTER INSERT ON orders
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION seckill_feed_orders();
CREATE TRIGGER feed_orders_update AFTER UPDATE ON orders
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION seckill_feed_orders();

CREATE FUNCTION seckill_feed_campaign() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kinds TEXT[] := '{}';
    v_kind TEXT;
    v_pending BIGINT := 0;
    v_at BIGINT := seckill_now_micros();
BEGIN
    IF TG_OP = 'INSERT' THEN
        kinds := ARRAY['campaign.created'];
        v_at := NEW.created_at;
    ELSE
        IF NEW.total > OLD.total THEN
            kinds := kinds || 'campaign.restocked'::TEXT;
        END IF;
        IF NEW.status <> OLD.status THEN
            kinds := kinds || (CASE NEW.status WHEN 'paused' THEN 'campaign.paused'
                                               WHEN 'active' THEN 'campaign.resumed'
                                               ELSE 'campaign.closed' END)::TEXT;
        END IF;
        IF cardinality(kinds) = 0 THEN
            RETURN NULL;
        END IF;
        SELECT COALESCE(SUM(qty), 0) INTO v_pending
          FROM orders WHERE campaign_id = NEW.id AND state = 'pending';
    END IF;
    FOREACH v_kind IN ARRAY kinds LOOP
        INSERT INTO feed (type, at, campaign_id, body)
        VALUES (v_kind, v_at, NEW.id, jsonb_build_object(
            'id', NEW.id, 'kind', NEW.kind, 'total', NEW.total, 'live', NEW.live_units,
            'pending', v_pending, 'per_user_limit', NEW.per_user_limit, 'status', NEW.status,
            'starts_at', NEW.starts_at, 'ends_at', NEW.ends_at,
            'hold_seconds', NEW.hold_seconds));
    END LOOP;
    RETURN NULL;
END
$$;
CREATE TRIGGER feed_campaign AFTER INSERT OR UPDATE OF total, status ON campaigns
    FOR EACH ROW EXECUTE FUNCTION seckill_feed_campaign();

-- Numbers up to `batch` committed events that have no position yet, in the order of their
-- ids, after the last position; returns the last position handed out, or NULL when another
-- numbering holds the head (it will number these too). Run in a transaction of its own.
CREATE FUNCTION seckill_feed_number(batch INTEGER) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    head BIGINT;
    n BIGINT;
BEGIN
    SELECT numbered INTO head FROM feed_head WHERE singleton FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE feed f SET pos = head + t.k, numbered_at = seckill_now_micros()
      FROM (SELECT id, row_number() OVER (ORDER BY id) AS k
              FROM (SELECT id FROM feed WHERE pos IS NULL ORDER BY id LIMIT batch) u) t
     WHERE f.id = t.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        UPDATE feed_head SET numbered = head + n WHERE singleton;
    END IF;
    RETURN head + n;
END
$$;

-- Removes events at the start of the feed that were numbered before `cutoff` (microseconds),
-- looking at the next `batch` positions only: the positions before the first event kept.
-- Returns the last position removed so far.
CREATE FUNCTION seckill_feed_prune(cutoff BIGINT, batch INTEGER) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    h RECORD;
    upto BIGINT;
BEGIN
    SELECT numbered, pruned_through INTO h FROM feed_head WHERE singleton FOR UPDATE;
    SELECT COALESCE(MIN(pos) - 1, LEAST(h.pruned_through + batch, h.numbered)) INTO upto
      FROM feed
     WHERE pos > h.pruned_through AND pos <= LEAST(h.pruned_through + batch, h.numbered)
       AND numbered_at >= cutoff;
    IF upto <= h.pruned_through THEN
        RETURN h.pruned_through;
    END IF;
    DELETE FROM feed WHERE pos > h.pruned_through AND pos <= upto;
    UPDATE feed_head SET pruned_through = upto WHERE singleton;
    RETURN upto;
END
$$;
