-- Fenced resources: the highest lock fence a job has written with. A write carrying a lower
-- fence comes from a holder whose lease has passed to someone else, and is refused
-- (`seckill::lock::fenced`).
CREATE TABLE IF NOT EXISTS job_fences (
    job         TEXT        PRIMARY KEY,
    fence       BIGINT      NOT NULL,
    written_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
