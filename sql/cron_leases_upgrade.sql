DO $pg_cron_lease$
BEGIN
BEGIN
  IF (SELECT count(*) FROM pg_attribute
      WHERE attrelid = '"cron_leases"'::regclass AND NOT attisdropped AND attname IN ('last_started_at', 'last_finished_at', 'last_duration_ms', 'last_outcome', 'last_error', 'last_success_at', 'every_ms', 'paused_until', 'claim_until', 'last_occurrence', 'next_due_at', 'next_occurrence', 'last_missed', 'missed_occurrences')) < 14 THEN
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
      ADD COLUMN IF NOT EXISTS missed_occurrences BIGINT;
  END IF;
END;
END
$pg_cron_lease$;
