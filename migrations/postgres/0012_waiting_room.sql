-- Waiting rooms (docs/WAITING_ROOM.md). A campaign's room settings are part of its immutable
-- definition (`waiting_room`, JSON text, NULL = no room). `room_key` holds the deployment's
-- secret for tickets and the pre-queue's shuffle, drawn once by the first instance that needs
-- it (INSERT … ON CONFLICT DO NOTHING, then read), so every instance signs and checks tickets
-- with the same key and a restart never changes it. The room itself lives in Redis.
ALTER TABLE campaigns ADD COLUMN waiting_room TEXT;

CREATE TABLE room_key (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    key       BYTEA NOT NULL CHECK (length(key) = 32)
);

-- The feed's campaign events show the room as GET /v1/campaigns/{id} does.
CREATE OR REPLACE FUNCTION seckill_feed_campaign() RETURNS trigger LANGUAGE plpgsql AS $$
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
            'hold_seconds', NEW.hold_seconds, 'waiting_room', NEW.waiting_room::jsonb));
    END LOOP;
    RETURN NULL;
END
$$;
