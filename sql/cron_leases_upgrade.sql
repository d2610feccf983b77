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
BEGIN
  IF to_regprocedure('"cron_leases_claim"(text, integer, text, bigint, integer, double precision, bigint, double precision, double precision)') IS NULL THEN
    CREATE FUNCTION "cron_leases_claim"(
      _job text, _lease_ms integer, _holder text, _occurrence_ms bigint, _tolerance_ms integer,
      _next_in_ms double precision, _next_occurrence_ms bigint, _every_ms double precision,
      _catch_up_ms double precision)
    RETURNS TABLE (claim_token text, missed bigint, occurrence text, interval_ms double precision)
    LANGUAGE plpgsql AS $claim$
#variable_conflict use_column
DECLARE
  _occurrence timestamptz := (to_timestamp((_occurrence_ms / 1000)::float8) + (_occurrence_ms % 1000) * interval '1 millisecond');
  _blocked boolean;
  _exists boolean;
BEGIN
  IF _catch_up_ms IS NOT NULL THEN
    RETURN QUERY UPDATE "cron_leases" AS lease
    SET lease_until = clock.at + _lease_ms * interval '1 millisecond',
      holder = _holder,
      claimed_at = clock.at,
      last_occurrence = (coalesce(lease.next_occurrence, lease.next_due_at) + coalesce(coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0)), 0) * nullif(coalesce(_every_ms, lease.every_ms), 0) * interval '1 millisecond', interval '0')),
      next_due_at = coalesce(clock.at + _next_in_ms * interval '1 millisecond', (lease.next_due_at + coalesce(coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0)), 0) * nullif(coalesce(_every_ms, lease.every_ms), 0) * interval '1 millisecond', interval '0')) + nullif(coalesce(_every_ms, lease.every_ms), 0) * interval '1 millisecond'),
      next_occurrence = coalesce((to_timestamp((_next_occurrence_ms / 1000)::float8) + (_next_occurrence_ms % 1000) * interval '1 millisecond'), (coalesce(lease.next_occurrence, lease.next_due_at) + coalesce(coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0)), 0) * nullif(coalesce(_every_ms, lease.every_ms), 0) * interval '1 millisecond', interval '0')) + nullif(coalesce(_every_ms, lease.every_ms), 0) * interval '1 millisecond'),
      last_missed = coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0)), 0)::bigint,
      missed_occurrences = coalesce(lease.missed_occurrences, 0) + coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0)), 0)::bigint
    FROM (SELECT clock_timestamp() AS at) AS clock
    WHERE lease.job_name = _job
      AND CASE WHEN lease.next_due_at <= clock.at AND lease.claimed_at < lease.next_due_at
          AND lease.lease_until <= clock.at
          AND extract(epoch FROM clock.at - (lease.next_due_at + coalesce(coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0)), 0) * nullif(coalesce(_every_ms, lease.every_ms), 0) * interval '1 millisecond', interval '0'))) * 1000 <= _catch_up_ms
          AND NOT coalesce(lease.last_occurrence >= (coalesce(lease.next_occurrence, lease.next_due_at) + coalesce(coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0)), 0) * nullif(coalesce(_every_ms, lease.every_ms), 0) * interval '1 millisecond', interval '0')), false)
        THEN EXISTS (SELECT FROM "cron_leases" AS locked WHERE locked.job_name = _job
          AND locked.lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
        ELSE false END
    RETURNING to_char(lease.claimed_at AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), lease.last_missed, to_char(lease.last_occurrence AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
      coalesce(_every_ms, lease.every_ms);
    RETURN;
  END IF;
  SELECT lease.lease_until > clock_timestamp() OR coalesce(lease.last_occurrence >= _occurrence, false)
    INTO _blocked FROM "cron_leases" AS lease WHERE lease.job_name = _job;
  _exists := FOUND;
  IF _blocked THEN RETURN; END IF;
  IF _occurrence > clock_timestamp() + _tolerance_ms * interval '1 millisecond' THEN RETURN; END IF;
  IF _exists THEN
    PERFORM FROM "cron_leases" AS lease WHERE lease.job_name = _job AND lease.lease_until <= clock_timestamp()
      FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN RETURN; END IF;
  END IF;
  RETURN QUERY
  INSERT INTO "cron_leases" AS lease (job_name, lease_until, holder, claimed_at, last_occurrence, next_due_at,
    next_occurrence, last_missed, missed_occurrences)
  SELECT _job, clock.at + _lease_ms * interval '1 millisecond', _holder, clock.at, _occurrence,
    clock.at + _next_in_ms * interval '1 millisecond', (to_timestamp((_next_occurrence_ms / 1000)::float8) + (_next_occurrence_ms % 1000) * interval '1 millisecond'), 0, 0
  FROM (SELECT clock_timestamp() AS at) AS clock
  ON CONFLICT (job_name) DO UPDATE
  SET lease_until = clock_timestamp() + _lease_ms * interval '1 millisecond',
    holder = EXCLUDED.holder,
    claimed_at = EXCLUDED.claimed_at,
    last_occurrence = coalesce(EXCLUDED.last_occurrence, lease.last_occurrence),
    next_due_at = EXCLUDED.next_due_at,
    next_occurrence = EXCLUDED.next_occurrence,
    last_missed = greatest(0, floor(extract(epoch FROM coalesce(EXCLUDED.last_occurrence, EXCLUDED.claimed_at) - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0) + 0.5))::bigint,
    missed_occurrences = coalesce(lease.missed_occurrences, 0) + greatest(0, floor(extract(epoch FROM coalesce(EXCLUDED.last_occurrence, EXCLUDED.claimed_at) - lease.next_due_at) * 1000 / nullif(coalesce(_every_ms, lease.every_ms), 0) + 0.5))::bigint
  WHERE lease.lease_until <= clock_timestamp()
    AND NOT coalesce(lease.last_occurrence >= EXCLUDED.last_occurrence, false)
  RETURNING to_char(lease.claimed_at AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), lease.last_missed, to_char(_occurrence AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), _every_ms;
END
$claim$;
  END IF;
EXCEPTION WHEN unique_violation OR duplicate_function THEN
  NULL; -- another session created it at the same moment
END;
END
$pg_cron_lease$;
