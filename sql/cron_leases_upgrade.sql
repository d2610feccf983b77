DO $pg_cron_lease$
BEGIN
BEGIN
  IF (SELECT count(*) FROM pg_attribute
      WHERE attrelid = '"cron_leases"'::regclass AND NOT attisdropped AND attname IN ('last_started_at', 'last_finished_at', 'last_duration_ms', 'last_outcome', 'last_error', 'last_success_at', 'every_ms', 'paused_until', 'claim_until', 'last_occurrence', 'next_due_at', 'next_occurrence', 'last_missed', 'missed_occurrences', 'run_number', 'failed_runs', 'runs_trimmed', 'unfinished_runs')) < 18 THEN
    ALTER TABLE "cron_leases"
      ADD COLUMN IF NOT EXISTS last_started_at TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS last_finished_at TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS last_duration_ms DOUBLE PRECISION,
      ADD COLUMN IF NOT EXISTS last_outcome TEXT,
      ADD COLUMN IF NOT EXISTS last_error TEXT,
      ADD COLUMN IF NOT EXISTS last_success_at TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS every_ms DOUBLE PRECISION,
      ADD COLUMN IF NOT EXISTS paused_until TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS claim_until TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS last_occurrence TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS next_due_at TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS next_occurrence TIMESTAMPTZ,
      ADD COLUMN IF NOT EXISTS last_missed BIGINT,
      ADD COLUMN IF NOT EXISTS missed_occurrences BIGINT,
      ADD COLUMN IF NOT EXISTS run_number BIGINT,
      ADD COLUMN IF NOT EXISTS failed_runs BIGINT,
      ADD COLUMN IF NOT EXISTS runs_trimmed BIGINT,
      ADD COLUMN IF NOT EXISTS unfinished_runs BIGINT;
  END IF;
  IF to_regclass('"cron_leases_runs"') IS NULL THEN
    CREATE TABLE IF NOT EXISTS "cron_leases_runs" (
      job_name       TEXT NOT NULL,
      run_number     BIGINT NOT NULL,
      failure_number BIGINT,
      claimed_at     TIMESTAMPTZ NOT NULL,
      occurrence     TIMESTAMPTZ,
      holder         TEXT,
      finished_at    TIMESTAMPTZ,
      duration_ms    DOUBLE PRECISION,
      outcome        TEXT NOT NULL,
      error          TEXT,
      missed         BIGINT NOT NULL DEFAULT 0,
      catch_up       BOOLEAN NOT NULL DEFAULT false,
      PRIMARY KEY (job_name, run_number)
    );
    CREATE INDEX IF NOT EXISTS "cron_leases_runs_failed" ON "cron_leases_runs" (job_name, failure_number)
      WHERE failure_number IS NOT NULL;
  END IF;
EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
  NULL; -- another session created it at the same moment
END;
END
$pg_cron_lease$;
