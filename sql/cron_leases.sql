CREATE TABLE IF NOT EXISTS "cron_leases" (
  job_name    TEXT PRIMARY KEY,
  lease_until TIMESTAMPTZ NOT NULL,
  holder      TEXT,
  claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
