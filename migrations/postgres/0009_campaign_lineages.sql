-- The Redis Cluster replication lineages a campaign was checked on against the ledger
-- (engine/redis/lineage.rs, ledger/postgres_lineage.rs). A lineage a check moved the campaign
-- away from is "left" at the last stream id the new node had (left_ms, left_seq): an entry read
-- from that lineage with a higher id was never on the node now serving the campaign, so the
-- check did not count it and the node issues its order number, unit and code again; the
-- pipeline refuses such an entry instead of writing it. The lineage still serving has no
-- left_at.
CREATE TABLE campaign_lineages (
    campaign_id TEXT NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    lineage     TEXT NOT NULL,
    left_ms     BIGINT,
    left_seq    BIGINT,
    PRIMARY KEY (campaign_id, lineage),
    CHECK ((left_ms IS NULL) = (left_seq IS NULL))
);
