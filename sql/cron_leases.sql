DO $pg_cron_lease$
BEGIN
BEGIN
  IF to_regclass('"cron_leases"') IS NULL THEN
    CREATE TABLE IF NOT EXISTS "cron_leases" (
      job_name    TEXT PRIMARY KEY,
      lease_until TIMESTAMPTZ NOT NULL,
      holder      TEXT,
      claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
      last_started_at    TIMESTAMPTZ,
      last_finished_at   TIMESTAMPTZ,
      last_duration_ms   DOUBLE PRECISION,
      last_outcome       TEXT,
      last_error         TEXT,
      last_success_at    TIMESTAMPTZ,
      every_ms           DOUBLE PRECISION,
      paused_until       TIMESTAMPTZ,
      claim_until        TIMESTAMPTZ,
      last_occurrence    TIMESTAMPTZ,
      next_due_at        TIMESTAMPTZ,
      next_occurrence    TIMESTAMPTZ,
      last_missed        BIGINT,
      missed_occurrences BIGINT,
      run_number         BIGINT,
      failed_runs        BIGINT,
      runs_trimmed       BIGINT,
      unfinished_runs    BIGINT
    );
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
  END IF;
EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
  NULL; -- another session created it at the same moment
END;
END
$pg_cron_lease$;
