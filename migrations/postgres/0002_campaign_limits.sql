-- Per-campaign rate limits of the guard layer (PUT /v1/campaigns/{id}/limits).
-- limits is the JSON of the API body, e.g. {"per_user":"5/s","per_ip":null}.
CREATE TABLE campaign_limits (
    campaign_id TEXT PRIMARY KEY,
    limits      TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);
