/** Every SQL text. Timestamps are `clock_timestamp()`: `NOW()` is the transaction's start; replicas' clocks differ. */
import { createHash } from 'node:crypto'
import { argumentError } from './errors.js'
import { formatValue } from './format-value.js'

/** The table used when no `table` option is given. */
export const DEFAULT_TABLE = 'cron_leases'

// The schema is never pg_*: pg_temp is per session, so every replica would win every claim.
const TABLE_NAME = /^(?:(?!pg_)[A-Za-z_][A-Za-z0-9_$]*\.)?[A-Za-z_][A-Za-z0-9_$]*$/

export const TABLE_RULE = 'an identifier or schema.identifier ([A-Za-z_][A-Za-z0-9_$]*), the schema not named pg_*'

/**
 * Quotes a table name, optionally schema-qualified; only plain identifiers are accepted.
 *
 * @example
 * quoteTable('jobs.leases') // '"jobs"."leases"'
 */
export function quoteTable(table: string): string {
  if (typeof table !== 'string' || !TABLE_NAME.test(table))
    throw argumentError('table', `must be ${TABLE_RULE}, got ${formatValue(table)}`)
  return `"${table.replace('.', '"."')}"`
}

// Postgres cuts an identifier past 63 bytes (NAMEDATALEN - 1), so two long names could share one: cut and hashed here.
const IDENTIFIER_BYTES = 63

function besideTable(table: string, suffix: string): string {
  quoteTable(table)
  const dot = table.indexOf('.')
  const schema = dot === -1 ? '' : table.slice(0, dot + 1)
  const name = table.slice(dot + 1)
  if (name.length + suffix.length <= IDENTIFIER_BYTES) return `${schema}${name}${suffix}`
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8)
  return `${schema}${name.slice(0, IDENTIFIER_BYTES - suffix.length - hash.length - 1)}_${hash}${suffix}`
}

/**
 * The run history's table for a lease table: `name_runs` in the same schema (past 63 bytes, cut and hashed).
 *
 * @example
 * historyTableOf('jobs.leases') // 'jobs.leases_runs'
 */
export const historyTableOf = (table: string): string => besideTable(table, '_runs')

// The original package's shape: all a claim, renew and list need.
const LEASE_COLUMNS = `  job_name    TEXT PRIMARY KEY,
  lease_until TIMESTAMPTZ NOT NULL,
  holder      TEXT,
  claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()`

// Added by the current shape; all nullable, so adding them rewrites nothing.
const CURRENT_COLUMNS = [
  ['last_started_at', 'TIMESTAMPTZ'], // the last run's claimed_at: the next claim minus it is the interval
  ['last_finished_at', 'TIMESTAMPTZ'], // for a run that died, its lease's end
  ['last_duration_ms', 'DOUBLE PRECISION'],
  ['last_outcome', 'TEXT'], // 'ok', 'error', 'unfinished', or NULL when the scheduler could not say
  ['last_error', 'TEXT'],
  ['last_success_at', 'TIMESTAMPTZ'],
  ['every_ms', 'DOUBLE PRECISION'],
  ['paused_until', 'TIMESTAMPTZ'],
  ['claim_until', 'TIMESTAMPTZ'], // the running claim's own lease end while a pause holds lease_until
  ['last_occurrence', 'TIMESTAMPTZ'], // latest occurrence claimed: no claim of it or earlier wins again
  ['next_due_at', 'TIMESTAMPTZ'],
  ['next_occurrence', 'TIMESTAMPTZ'], // the next occurrence as the schedule names it: catch-up's key
  ['last_missed', 'BIGINT'],
  ['missed_occurrences', 'BIGINT'],
] as const

export const CURRENT_COLUMN_NAMES: readonly string[] = CURRENT_COLUMNS.map(([name]) => name)

// The run history's columns in the lease row; apart, so a table upgraded before it keeps its claims.
const HISTORY_COLUMNS = [
  ['run_number', 'BIGINT'], // the last run written to the history
  ['failed_runs', 'BIGINT'], // each run not ok is numbered among these too
  ['runs_trimmed', 'BIGINT'], // the next trim starts above this run
  ['unfinished_runs', 'BIGINT'], // never trimmed
] as const
const ADDED = [...CURRENT_COLUMNS, ...HISTORY_COLUMNS]
const quoted = (columns: readonly (readonly string[])[]) => columns.map(([name]) => `'${name}'`).join(', ')

// failure_number numbers the runs not ok, so the trim finds the last M of them without a scan.
const RUN_COLUMNS = `  job_name       TEXT NOT NULL,
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
  PRIMARY KEY (job_name, run_number)`

// Expressions said once. An interval of 0 is NULL, which would divide by zero.
const OBSERVED_EVERY = 'nullif(lease.every_ms, 0)'
const every = (declared: string) => `nullif(coalesce(${declared}::float8, lease.every_ms), 0)`
const ms = (expression: string) => `${expression} * interval '1 millisecond'`
const msBetween = (later: string, earlier: string) => `extract(epoch FROM ${later} - ${earlier}) * 1000`
// Seconds and ms apart: a float8 of seconds with a fraction is inexact past about year 3000.
const fromMs = (epochMs: string) => `(to_timestamp((${epochMs} / 1000)::float8) + ${ms(`(${epochMs} % 1000)`)})`
// Shifted by interval, not zone name: on Postgres 18 a POSIX-form session zone can rename UTC.
export const isoText = (expression: string) =>
  `to_char(${expression} AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
const isoTextOrInfinity = (at: string) => `CASE WHEN isfinite(${at}) THEN ${isoText(at)} ELSE ${at}::text END`
// Read without zone, so the `Z` is not looked up among the session's abbreviations.
const fromIsoText = (text: string) => `((${text}::text)::timestamp AT TIME ZONE INTERVAL '+00:00')`
// The last run recorded no end: it runs, or it died.
const UNENDED = 'coalesce(lease.last_started_at > lease.last_finished_at, lease.last_started_at IS NOT NULL)'

// The shift of a due time to its schedule's first occurrence at or after `end` (no interval: to `end`).
const toFirstDue = (due: string, end: string) =>
  `coalesce(${ms(`ceil(${msBetween(end, due)} / ${OBSERVED_EVERY}) * ${OBSERVED_EVERY}`)}, ${end} - ${due})`

// Occurrences due under a pause are skipped, not missed; pauseSql and resumeSql move a stored due time.
const dueAfterPause = (due: string) => `(${due} + CASE WHEN lease.paused_until > ${due} AND isfinite(lease.paused_until)
    THEN ${toFirstDue(due, 'lease.paused_until')} ELSE interval '0' END)`

function createHistory(table: string): string {
  const h = quoteTable(historyTableOf(table))
  const failed = besideTable(table, '_runs_failed')
  return `IF to_regclass('${h}') IS NULL THEN
  CREATE TABLE IF NOT EXISTS ${h} (
${RUN_COLUMNS.replace(/^/gm, '  ')}
  );
  CREATE INDEX IF NOT EXISTS "${failed.slice(failed.indexOf('.') + 1)}" ON ${h} (job_name, failure_number)
    WHERE failure_number IS NOT NULL;
END IF;
`
}

/**
 * The DDL that creates a lease table, safe for every replica on every start:
 * racing creators are caught and ignored, and an existing table needs no `CREATE` privilege.
 *
 * @example
 * await pool.query(createTableSql('jobs.leases'))
 */
export function createTableSql(table: string = DEFAULT_TABLE): string {
  const t = quoteTable(table)
  const columns = [LEASE_COLUMNS, ...ADDED.map(([name, type]) => `  ${name.padEnd(18)} ${type}`)]
  // The history only with a new lease table: an existing one gets it from `pg-cron-lease migrate`.
  return doBlock(`  IF to_regclass('${t}') IS NULL THEN
    CREATE TABLE IF NOT EXISTS ${t} (
${columns.join(',\n').replace(/^/gm, '    ')}
    );
${createHistory(table).replace(/^(?=.)/gm, '    ')}  END IF;
`)
}

/**
 * The DDL that brings an older lease table to the current shape; idempotent and safe to race.
 *
 * @example
 * await pool.query(upgradeTableSql()) // replicas use the new shape within a minute, no restart
 */
export function upgradeTableSql(table: string = DEFAULT_TABLE): string {
  const t = quoteTable(table)
  return doBlock(`  IF (SELECT count(*) FROM pg_attribute
      WHERE attrelid = '${t}'::regclass AND NOT attisdropped AND attname IN (${quoted(ADDED)})) < ${ADDED.length} THEN
    ALTER TABLE ${t}
${ADDED.map(([name, type]) => `      ADD COLUMN IF NOT EXISTS ${name} ${type}`).join(',\n')};
  END IF;
${createHistory(table).replace(/^(?=.)/gm, '  ')}`)
}

/** The DDL for the default `cron_leases` table, as in `sql/cron_leases.sql`. */
export const CRON_LEASES_TABLE_SQL: string = createTableSql(DEFAULT_TABLE)

// Racing creators are caught and ignored, in a dollar-quote tag the body (table names may contain `$`) cannot close.
function doBlock(body: string): string {
  const block = `BEGIN
${body}EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
  NULL; -- another session created it at the same moment
END;
`
  let tag = '$pg_cron_lease$'
  for (let n = 1; block.includes(tag); n++) tag = `$pg_cron_lease_${n}$`
  return `DO ${tag}\nBEGIN\n${block}END\n${tag};\n`
}

// `$4` the window in ms (a clock minus a due time can leave timestamp range); `$5`–`$9` as the claim's `$6`–`$10`.
// The lock is last in a CASE: an AND may run it first, costing a loser an xid.
export function catchUpSql(table: string, kind: RunKind): string {
  const t = quoteTable(table)
  // A pause's slots are skipped, not made up: pauseSql and resumeSql moved the due time past it.
  const due = 'lease.next_due_at'
  const skipped = `coalesce(floor(${msBetween('clock.at', due)} / ${every('$7')}), 0)`
  const steps = `coalesce(${ms(`${skipped} * ${every('$7')}`)}, interval '0')`
  const dueAt = `(${due} + ${steps})`
  const slot = `(coalesce(lease.next_occurrence, lease.next_due_at) + ${steps})`
  const number = `coalesce(lease.run_number, (${lastRunNumber(table)})) + 1`
  const update = `UPDATE ${t} AS lease
SET lease_until = clock.at + ${ms('$2::integer')},
  holder = $3::text,
  claimed_at = clock.at,
  last_occurrence = ${slot},
  next_due_at = coalesce(clock.at + ${ms('$5::float8')}, ${dueAt} + ${ms(every('$7'))}),
  next_occurrence = coalesce(${fromMs('$6::bigint')}, ${slot} + ${ms(every('$7'))}),
  last_missed = ${skipped}::bigint,
  missed_occurrences = coalesce(lease.missed_occurrences, 0) + ${skipped}::bigint${runStarted(kind, 'clock.at', 'coalesce($7::float8, lease.every_ms)', number, '$8')}
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE lease.job_name = $1::text
  AND CASE WHEN ${due} <= clock.at AND lease.claimed_at < lease.next_due_at
      AND lease.lease_until <= clock.at
      AND ${msBetween('clock.at', dueAt)} <= $4::float8
      AND NOT coalesce(lease.last_occurrence >= ${slot}, false)
    THEN EXISTS (SELECT FROM ${t} AS locked WHERE locked.job_name = $1::text
      AND locked.lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
    ELSE false END`
  const returned = (row: string) => `${won(row)}, ${isoText(`${row}.last_occurrence`)} AS occurrence`
  return withRunRow(table, kind, update, true, '$9', returned)
}

// The token travels as text: drivers round timestamptz to ms, and a fence would match the wrong claim.
const CLAIM_TOKEN = isoText('claimed_at')

export type Shape = 'current' | 'original'

// A claim's read-only probe: a row back (held, or occurrence `$2` taken) and it stops.
export function probeSql(table: string): string {
  return `SELECT true AS held FROM ${quoteTable(table)} AS lease
WHERE lease.job_name = $1::text
  AND (lease.lease_until > clock_timestamp() OR lease.last_occurrence >= ${fromMs('$2::bigint')})`
}

// What a claim on the current shape writes besides its lease: nothing, its run in the row, or also in the history.
export type RunKind = 'lease' | 'run' | 'history'

export type ClaimKind = 'original' | RunKind

const diedError = (holder: string, lostAt: string): string =>
  `format('the run of %s had not ended when its lease ran out, by %s (its process died, or it lost the lease)',
    coalesce(${holder}, 'a replica'), ${isoText(lostAt)})`

// For a row with no run number yet (new, or made again).
const lastRunNumber = (table: string): string =>
  `SELECT coalesce(max(run.run_number), 0) FROM ${quoteTable(historyTableOf(table))} AS run WHERE run.job_name = $1::text`

// A last run that recorded no end ended `unfinished`: this claim won past its lease, so its replica died or lost it.
function runStarted(kind: ClaimKind, start: string, interval: string, number: string, keep: string): string {
  if (kind !== 'run' && kind !== 'history') return ''
  const died = (then: string, otherwise: string) => `CASE WHEN ${UNENDED} THEN ${then} ELSE ${otherwise} END`
  const observed = `CASE WHEN lease.last_started_at < ${start} THEN (${msBetween(start, 'lease.last_started_at')})::float8 END`
  const set = [
    `last_started_at = ${start}`,
    `every_ms = coalesce(${interval}::float8, ${observed}, lease.every_ms)`,
    `last_outcome = ${died("'unfinished'", 'lease.last_outcome')}`,
    `last_finished_at = ${died('lease.lease_until', 'lease.last_finished_at')}`,
    `last_duration_ms = ${died('NULL', 'lease.last_duration_ms')}`,
    `last_error = ${died(diedError('lease.holder', 'lease.lease_until'), 'lease.last_error')}`,
  ]
  if (kind === 'history')
    set.push(
      `run_number = ${number}`,
      `failed_runs = coalesce(lease.failed_runs, 0) + ${died('1', '0')}`,
      `unfinished_runs = coalesce(lease.unfinished_runs, 0) + ${died('1', '0')}`,
      `runs_trimmed = greatest(coalesce(lease.runs_trimmed, 0), ${number} - ${keep}::integer)`,
    )
  return `,\n  ${set.join(',\n  ')}`
}

const won = (row: string) => `${isoText(`${row}.claimed_at`)} AS claimed_at, ${row}.last_missed AS missed`

// Runs found by number, so the trim costs the same at run 10 and run 100,000; `keep` the failed runs kept.
function withRunRow(table: string, kind: ClaimKind, upsert: string, catchUp: boolean, keep: string, returned = won) {
  if (kind !== 'history') return `${upsert}\nRETURNING ${returned('lease')}`
  const h = quoteTable(historyTableOf(table))
  // Each bound read once as a scalar, so runs are found by the key: a join would read every row kept.
  const of = (expression: string, from = 'claimed') => `(SELECT ${expression} FROM ${from})`
  const previous = `run.run_number = ${of('claimed.run_number - 1')}`
  const kept = of(`claimed.failed_runs - ${keep}::integer`)
  return `WITH before AS MATERIALIZED (
  SELECT coalesce(max(lease.runs_trimmed), 0) AS trimmed FROM ${quoteTable(table)} AS lease WHERE lease.job_name = $1::text),
claimed AS (
${upsert.replace(/^/gm, '  ')}
  RETURNING lease.*),
"run started" AS (
  INSERT INTO ${h} (job_name, run_number, claimed_at, occurrence, holder, outcome, missed, catch_up)
  SELECT claimed.job_name, claimed.run_number, claimed.claimed_at, claimed.last_occurrence, claimed.holder, 'running',
    claimed.last_missed, ${catchUp} FROM claimed),
"run died" AS (
  UPDATE ${h} AS run SET outcome = 'unfinished', failure_number = ${of('claimed.failed_runs')}
  WHERE run.job_name = $1::text AND ${previous} AND run.outcome = 'running'
  RETURNING run.run_number),
-- Past the last keep now (more, once, when keep was lowered): the one that just died is numbered first.
"runs trimmed" AS (
  DELETE FROM ${h} AS run
  WHERE run.job_name = $1::text AND run.run_number > ${of('before.trimmed', 'before')}
    AND run.run_number <= ${of('claimed.runs_trimmed')}
    AND (run.failure_number IS NULL OR run.failure_number <= ${kept})
    AND NOT (${previous} AND run.outcome = 'running')),
-- The failures kept from before, past the last keepFailed once one more died.
"failures trimmed" AS (
  DELETE FROM ${h} AS run
  WHERE EXISTS (SELECT FROM "run died") AND run.job_name = $1::text AND run.failure_number <= ${kept}
    AND run.run_number <= ${of('before.trimmed', 'before')})
SELECT ${returned('claimed')}, claimed.run_number FROM claimed`
}

// `$4` the occurrence (NULL: the lease alone), `$5` how far ahead of the clock it may lie, `$6`/`$7` the next due
// time (ms from now) and occurrence, `$8` the interval, `$9`/`$10` the runs and the runs not ok to keep.
export function claimSql(table: string, kind: ClaimKind): string {
  const t = quoteTable(table)
  if (kind === 'original') {
    // Only a claimant that can lock an expired row now (`SKIP LOCKED`) reaches the upsert.
    return `INSERT INTO ${t} AS lease (job_name, lease_until, holder, claimed_at)
SELECT $1::text, clock.at + ${ms('$2::integer')}, $3::text, clock.at
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE CASE (SELECT lease_until > clock_timestamp() FROM ${t} WHERE job_name = $1::text)
  WHEN true THEN false
  WHEN false THEN EXISTS (SELECT FROM ${t} WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
  ELSE true
END
ON CONFLICT (job_name) DO UPDATE
SET lease_until = clock_timestamp() + ${ms('$2::integer')},
  holder = EXCLUDED.holder,
  claimed_at = EXCLUDED.claimed_at
WHERE lease.lease_until <= clock_timestamp()
RETURNING ${CLAIM_TOKEN} AS claimed_at`
  }
  // floor(x + 0.5), as round() takes a float8's half to the even neighbour: half an interval late misses none.
  const missed = `greatest(0, floor(${msBetween('coalesce(EXCLUDED.last_occurrence, EXCLUDED.claimed_at)', 'lease.next_due_at')} / ${every('$8')} + 0.5))::bigint`
  const started: Record<RunKind, [columns: string, values: string]> = {
    lease: ['', ''],
    run: [', last_started_at, every_ms', ', clock.at, $8::float8'],
    history: [
      ', last_started_at, every_ms, run_number, failed_runs, unfinished_runs, runs_trimmed',
      `, clock.at, $8::float8, (${lastRunNumber(table)}) + 1, 0, 0, 0`,
    ],
  }
  const [columns, values] = started[kind]
  const upsert = `INSERT INTO ${t} AS lease (job_name, lease_until, holder, claimed_at, last_occurrence, next_due_at,
  next_occurrence, last_missed, missed_occurrences${columns})
SELECT $1::text, clock.at + ${ms('$2::integer')}, $3::text, clock.at, slot.at,
  clock.at + ${ms('$6::float8')}, ${fromMs('$7::bigint')}, 0, 0${values}
FROM (SELECT clock_timestamp() AS at) AS clock, (SELECT ${fromMs('$4::bigint')} AS at) AS slot
WHERE CASE WHEN slot.at > clock.at + ${ms('$5::integer')} THEN false
  ELSE NOT EXISTS (SELECT FROM ${t} WHERE job_name = $1::text)
    OR EXISTS (SELECT FROM ${t} AS free WHERE free.job_name = $1::text AND free.lease_until <= clock_timestamp()
      AND NOT coalesce(free.last_occurrence >= slot.at, false) FOR UPDATE SKIP LOCKED)
END
ON CONFLICT (job_name) DO UPDATE
SET lease_until = clock_timestamp() + ${ms('$2::integer')},
  holder = EXCLUDED.holder,
  claimed_at = EXCLUDED.claimed_at,
  last_occurrence = coalesce(EXCLUDED.last_occurrence, lease.last_occurrence),
  next_due_at = EXCLUDED.next_due_at,
  next_occurrence = EXCLUDED.next_occurrence,
  last_missed = ${missed},
  missed_occurrences = coalesce(lease.missed_occurrences, 0) + ${missed}${runStarted(kind, 'EXCLUDED.claimed_at', '$8', 'coalesce(lease.run_number + 1, EXCLUDED.run_number)', '$9')}
WHERE lease.lease_until <= clock_timestamp()
  AND NOT coalesce(lease.last_occurrence >= EXCLUDED.last_occurrence, false)`
  return withRunRow(table, kind, upsert, false, '$10')
}

// A pause holds while the lease is what it made: another writer of lease_until (the original package's renew) ends it.
const pauseHolds = (now = 'clock.at'): string =>
  `coalesce(lease.paused_until > ${now} AND lease.lease_until = GREATEST(lease.claim_until, lease.paused_until), false)`

// The beat (`$4`) never moves the lease earlier.
export function renewSql(table: string, shape: Shape): string {
  const paused = shape === 'current' ? `\n  AND NOT ${pauseHolds('clock_timestamp()')}` : ''
  return `UPDATE ${quoteTable(table)} AS lease
SET lease_until = CASE WHEN $4::boolean
  THEN GREATEST(lease_until, clock_timestamp() + ${ms('$2::integer')})
  ELSE clock_timestamp() + ${ms('$2::integer')} END
WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$3')} AND lease_until > clock_timestamp()${paused}
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

export function lostLeaseSql(table: string, shape: Shape): string {
  const current = shape === 'current'
  return `SELECT lease.claimed_at = ${fromIsoText('$2')} AS same_claim,
  ${current ? pauseHolds('clock_timestamp()') : 'false'} AS paused,
  ${current ? isoTextOrInfinity('lease.paused_until') : 'NULL::text'} AS paused_until,
  lease.lease_until > clock_timestamp() AS held
FROM ${quoteTable(table)} AS lease
WHERE lease.job_name = $1::text`
}

// `FOR KEY SHARE` blocks only a claim's `FOR UPDATE`, not renews or beats.
export function fenceSql(table: string): string {
  return `SELECT true AS fenced FROM ${quoteTable(table)} AS lease
WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$2')}
FOR KEY SHARE`
}

const RUN_ENDED = `last_finished_at = clock.at,
  last_duration_ms = $3::float8,
  last_outcome = $4::text,
  last_error = $5::text,
  last_success_at = CASE WHEN $4::text = 'ok' THEN clock.at ELSE lease.last_success_at END`

const RECORD_FENCE = `lease.job_name = $1::text AND lease.claimed_at = ${fromIsoText('$2')}`

// `$3` the duration, `$4` the outcome (NULL: unknown), `$5` the error.
export function recordOutcomeSql(table: string): string {
  return `UPDATE ${quoteTable(table)} AS lease
SET ${RUN_ENDED}
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE ${RECORD_FENCE}`
}

// Also run `$6` in the history, even after another claim replaced it: a late run keeps its real outcome.
export function recordRunSql(table: string): string {
  const h = quoteTable(historyTableOf(table))
  const failed = `$4::text = 'error'`
  return `WITH "db clock" AS MATERIALIZED (SELECT clock_timestamp() AS at),
recorded AS (
  UPDATE ${quoteTable(table)} AS lease
  SET ${RUN_ENDED.replace(/\n {2}/g, '\n    ')},
    failed_runs = coalesce(lease.failed_runs, 0) + CASE WHEN ${failed} THEN 1 ELSE 0 END
  FROM "db clock" AS clock
  WHERE ${RECORD_FENCE}
  RETURNING lease.failed_runs, lease.runs_trimmed),
"failures trimmed" AS (
  DELETE FROM ${h} AS run USING recorded
  WHERE ${failed} AND run.job_name = $1::text AND run.failure_number <= recorded.failed_runs - $7::integer
    AND run.run_number <= recorded.runs_trimmed)
UPDATE ${h} AS run
SET finished_at = clock.at, duration_ms = $3::float8, outcome = coalesce($4::text, 'unknown'), error = $5::text,
  failure_number = CASE WHEN ${failed} THEN coalesce((SELECT recorded.failed_runs FROM recorded), run.failure_number)
    WHEN $4::text = 'ok' THEN NULL ELSE run.failure_number END
FROM "db clock" AS clock
-- The lease row first (its number read through \`recorded\`, which runs it before the scan), then the run's
-- row, as every claim locks them: the other order deadlocks with the claim that replaces this run.
WHERE run.job_name = $1::text AND run.run_number = coalesce((SELECT $6::bigint FROM recorded), $6::bigint)
  AND run.claimed_at = ${fromIsoText('$2')}
  AND run.outcome IN ('running', 'unfinished')`
}

// The doctor's race job, never listed as the user's.
const NOT_DOCTOR = `!~ '^pg-cron-lease:doctor:[0-9a-f]{16}$'`

// At one clock read, which an empty table returns as one row with no job.
export function listLeasesSql(table: string, shape: Shape, history = false): string {
  // Materialized, as a subquery could be rescanned; the space in the name shadows no table.
  const at = '"db clock".at'
  const current = shape === 'current'
  const column = (name: string, type: string) => (current ? `lease.${name}` : `NULL::${type}`)
  const base = `coalesce(lease.next_due_at, lease.claimed_at + ${ms(OBSERVED_EVERY)})`
  const resumedAt = current
    ? `CASE WHEN lease.paused_until <= ${at} AND lease.paused_until > lease.claimed_at THEN ${isoText('lease.paused_until')} END`
    : 'NULL::text'
  // A claim that marks no run (record: false, the original package) changes it not.
  const lastRun = current
    ? `CASE WHEN NOT ${UNENDED} THEN 'ended'
    WHEN lease.claimed_at = lease.last_started_at AND ${claimEnd(at)} > ${at} THEN 'running'
    ELSE 'unfinished' END`
    : `'ended'`
  // A run that died lost its lease at its end, or at the latest at the claim that replaced it.
  const lostAt = `CASE WHEN lease.claimed_at = lease.last_started_at THEN ${claimEnd(at)} ELSE lease.claimed_at END`
  const died = (then: string, otherwise: string) =>
    current ? `CASE WHEN lease.last_run = 'unfinished' THEN ${then} ELSE ${otherwise} END` : otherwise
  const holder = 'CASE WHEN lease.claimed_at = lease.last_started_at THEN lease.holder END'
  return `WITH "db clock" AS MATERIALIZED (SELECT clock_timestamp() AS at)
SELECT lease.job_name,
  lease.holder,
  ${isoText('lease.claimed_at')} AS claimed_at,
  ${isoTextOrInfinity('lease.lease_until')} AS lease_until,
  lease.lease_until > ${at} AS held,
  CASE WHEN NOT isfinite(lease.lease_until) THEN 'Infinity'::float8
    WHEN lease.lease_until > ${at} THEN ceil(${msBetween('lease.lease_until', at)})::float8
    ELSE 0::float8 END AS remaining_ms,
  ${isoText(at)} AS checked_at,
  CASE WHEN lease.last_run = 'ended' THEN ${column('last_outcome', 'text')} ELSE lease.last_run END AS last_outcome,
  ${died("'unfinished'", column('last_outcome', 'text'))} AS last_ended_outcome,
  ${isoText(column('last_started_at', 'timestamptz'))} AS last_started_at,
  ${isoText(died(lostAt, column('last_finished_at', 'timestamptz')))} AS last_finished_at,
  ${died('NULL', column('last_duration_ms', 'float8'))} AS last_duration_ms,
  ${died(diedError(holder, lostAt), column('last_error', 'text'))} AS last_error,
  ${isoText(column('last_success_at', 'timestamptz'))} AS last_success_at,
  ${column('every_ms', 'float8')} AS every_ms,
  ${isoTextOrInfinity(column('paused_until', 'timestamptz'))} AS paused_until,
  ${current ? pauseHolds(at) : 'false'} AS paused,
  ${resumedAt} AS resumed_at,
  ${isoText(column('last_occurrence', 'timestamptz'))} AS last_occurrence,
  ${isoText(current ? dueAfterPause('lease.next_due_at') : 'NULL::timestamptz')} AS next_due_at,
  (${msBetween(at, current ? dueAfterPause(base) : 'NULL::timestamptz')})::float8 AS since_due_ms,
  coalesce(${column('missed_occurrences', 'bigint')}, 0)::float8 AS missed,
  ${history ? `(coalesce(lease.unfinished_runs, 0) + ${died('1', '0')})::float8` : 'NULL::float8'} AS unfinished_runs
FROM "db clock" LEFT JOIN LATERAL (
  SELECT lease.*, ${lastRun.replace(/\n/g, '\n  ')} AS last_run
  FROM ${quoteTable(table)} AS lease
  WHERE lease.job_name ${NOT_DOCTOR}) AS lease ON true
ORDER BY lease.job_name COLLATE "C"`
}

function adminReturning(shape: Shape): string {
  // A pause that ended is kept only for the due time (resumeSql).
  const pausedUntil =
    shape === 'current'
      ? `CASE WHEN lease.paused_until > clock.at THEN ${isoTextOrInfinity('lease.paused_until')} END`
      : 'NULL::text'
  return `RETURNING lease.job_name,
    ${isoTextOrInfinity('lease.lease_until')} AS lease_until,
    ${pausedUntil} AS paused_until,
    ${isoText('clock.at')} AS checked_at`
}

// A pause made before claim_until existed kept no claim end: taken as now.
const claimEnd = (now = 'clock.at'): string =>
  `CASE WHEN ${pauseHolds(now)} THEN coalesce(lease.claim_until, ${now})
    ELSE lease.lease_until END`

// The clock is read after the row lock, or a committing claim would be judged by an earlier instant. The lock waits
// at most `wait` ms, as a crashed holder's idle fence holds it for ever; a 55P03 rolls the setting back.
function lockedClock(table: string, wait: string, gate = 'true'): string {
  return `was AS MATERIALIZED (SELECT current_setting('lock_timeout') AS lock_timeout),
waiting AS MATERIALIZED (SELECT set_config('lock_timeout', (${wait}::integer)::text, true) FROM was),
locked AS MATERIALIZED (SELECT lease.* FROM ${quoteTable(table)} AS lease
  WHERE lease.job_name = $1::text AND ${gate} AND EXISTS (SELECT FROM waiting) FOR UPDATE),
clock AS MATERIALIZED (SELECT clock_timestamp() AS at FROM (SELECT count(*) FROM locked) AS after_lock)`
}

const restoreLockTimeout = `set_config('lock_timeout', (SELECT lock_timeout FROM was), true) AS lock_timeout`

// `$2` the length, `$3` the end, `$4` the row lock's wait. Occurrences due are missed (settle), those under it skipped.
export function pauseSql(table: string): string {
  const steps = `floor(${msBetween('clock.at', 'lease.next_due_at')} / ${OBSERVED_EVERY}) + 1`
  // Refused before locking: a refusal must not hold the row for the caller's transaction.
  const future = `($3::text IS NULL OR ${fromIsoText('$3')} > clock_timestamp())`
  // A pause ending after the last instant `new Date()` reads as ISO text is open-ended.
  return `WITH ${lockedClock(table, '$4', future)},
pause AS MATERIALIZED (
  SELECT CASE
    WHEN $2::float8 IS NOT NULL THEN
      CASE WHEN $2::float8 < (${msBetween("'9999-12-31T23:59:59.999Z'::timestamptz", 'clock.at')})::float8
        THEN clock.at + ${ms('$2::float8')}
        ELSE 'infinity'::timestamptz END
    WHEN $3::text IS NOT NULL THEN ${fromIsoText('$3')}
    ELSE 'infinity'::timestamptz END AS until
  FROM clock),
settle AS MATERIALIZED (
  SELECT coalesce(${steps}, 1)::bigint AS missed,
    coalesce(${ms(`(${steps}) * ${OBSERVED_EVERY}`)},
      clock.at - lease.next_due_at) AS shift
  FROM locked AS lease CROSS JOIN clock
  WHERE NOT ${pauseHolds()} AND lease.next_due_at <= clock.at),
moved AS MATERIALIZED (
  SELECT coalesce(settle.shift, interval '0') + CASE WHEN isfinite(pause.until) AND pause.until > due.at
      THEN ${toFirstDue('due.at', 'pause.until')} ELSE interval '0' END AS shift
  FROM locked AS lease CROSS JOIN pause LEFT JOIN settle ON true
    CROSS JOIN LATERAL (SELECT lease.next_due_at + coalesce(settle.shift, interval '0') AS at) AS due),
changed AS (
  UPDATE ${quoteTable(table)} AS lease
  SET claim_until = ${claimEnd()},
    lease_until = GREATEST(${claimEnd()}, pause.until),
    paused_until = pause.until,
    next_due_at = lease.next_due_at + coalesce(moved.shift, interval '0'),
    next_occurrence = lease.next_occurrence + coalesce(moved.shift, interval '0'),
    missed_occurrences = CASE WHEN settle.missed IS NULL THEN lease.missed_occurrences
      ELSE coalesce(lease.missed_occurrences, 0) + settle.missed END
  FROM clock CROSS JOIN pause LEFT JOIN settle ON true LEFT JOIN moved ON true
  WHERE lease.job_name = $1::text AND pause.until > clock.at
  ${adminReturning('current')})
SELECT changed.*, pause.until > clock.at AS in_future, ${isoText('clock.at')} AS clock_at, ${restoreLockTimeout}
FROM clock CROSS JOIN pause LEFT JOIN changed ON true`
}

// A claim's own lease (claim_until) runs on; the end stays in paused_until, as a lapsed pause leaves it.
export function resumeSql(table: string): string {
  return `WITH ${lockedClock(table, '$2')},
before AS MATERIALIZED (
  SELECT ${pauseHolds()} AS was_paused,
    CASE WHEN ${pauseHolds()} THEN ${toFirstDue('lease.next_due_at', 'clock.at')} END AS shift
  FROM locked AS lease, clock),
changed AS (
  UPDATE ${quoteTable(table)} AS lease
  SET paused_until = CASE WHEN lease.paused_until > clock.at THEN clock.at ELSE lease.paused_until END,
    lease_until = CASE WHEN ${pauseHolds()} THEN LEAST(lease.lease_until, GREATEST(${claimEnd()}, clock.at))
      ELSE lease.lease_until END,
    next_due_at = lease.next_due_at + coalesce(before.shift, interval '0'),
    next_occurrence = lease.next_occurrence + coalesce(before.shift, interval '0')
  FROM clock LEFT JOIN before ON true
  WHERE lease.job_name = $1::text
  ${adminReturning('current')})
SELECT changed.*, coalesce(before.was_paused, false) AS was_paused, ${restoreLockTimeout}
FROM clock LEFT JOIN changed ON true LEFT JOIN before ON true`
}

export function releaseSql(table: string, shape: Shape): string {
  const set =
    shape === 'current'
      ? `lease_until = CASE WHEN ${pauseHolds()} THEN LEAST(lease.lease_until, lease.paused_until)
  ELSE LEAST(lease.lease_until, clock.at) END,
  claim_until = LEAST(lease.claim_until, clock.at)`
      : 'lease_until = LEAST(lease.lease_until, clock.at)'
  return `WITH ${lockedClock(table, '$2')},
changed AS (
  UPDATE ${quoteTable(table)} AS lease
  SET ${set}
  FROM clock
  WHERE lease.job_name = $1::text
  ${adminReturning(shape)})
SELECT changed.*, ${restoreLockTimeout}
FROM clock LEFT JOIN changed ON true`
}

// pg_locks lists no row lock: its holder's xid is the row's xmax, else (a fence's savepoint leaves a
// subtransaction's) any transaction as old that locks the table. A multixact (several lockers) is not resolved.
export function rowLockHoldersSql(table: string): string {
  const t = quoteTable(table)
  return `WITH lease AS MATERIALIZED (SELECT lease.xmax FROM ${t} AS lease WHERE lease.job_name = $1::text),
other AS MATERIALIZED (SELECT activity.pid, activity.application_name, activity.backend_xid
  FROM pg_stat_activity AS activity WHERE activity.pid <> pg_backend_pid() AND activity.backend_xid IS NOT NULL),
exact AS MATERIALIZED (SELECT other.pid, other.application_name FROM other, lease WHERE other.backend_xid = lease.xmax)
SELECT pid, application_name FROM exact
UNION
SELECT other.pid, other.application_name FROM other, lease
WHERE NOT EXISTS (SELECT FROM exact) AND age(other.backend_xid) >= age(lease.xmax)
  AND EXISTS (SELECT FROM pg_locks AS held WHERE held.pid = other.pid AND held.locktype = 'relation'
    AND held.relation = '${t}'::regclass)
ORDER BY pid`
}

// `history`: the run history is there and writable; `history_shape`: there.
export const TABLE_FACTS_SQL = `SELECT to_regclass($1::text) IS NOT NULL AS exists,
  (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1::text) AND attnum > 0 AND NOT attisdropped)::int AS columns,
  (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1::text) AND NOT attisdropped
    AND attname = ANY ($2::text[]))::int = cardinality($2::text[]) AS current,
  -- A claim writes its run there: a role that may not has a table without it, not a failed claim.
  run.shape AND (SELECT bool_and(has_table_privilege(to_regclass($3::text), privilege))
    FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS privilege) AS history,
  run.shape AS history_shape,
  to_regclass($3::text) IS NOT NULL AS history_table,
  ${isoText('clock_timestamp()')} AS checked_at
FROM (SELECT to_regclass($3::text) IS NOT NULL AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1::text)
    AND NOT attisdropped AND attname IN (${quoted(HISTORY_COLUMNS)})) = ${HISTORY_COLUMNS.length} AS shape) AS run`

export function tableFactsParams(table: string): unknown[] {
  return [quoteTable(table), CURRENT_COLUMN_NAMES, quoteTable(historyTableOf(table))]
}

export function listRunsSql(table: string): string {
  const outcome = `CASE WHEN run.outcome <> 'running' THEN run.outcome
    WHEN lease.claimed_at = run.claimed_at AND ${claimEnd()} > clock.at THEN 'running'
    ELSE 'unfinished' END`
  return `WITH "db clock" AS MATERIALIZED (SELECT clock_timestamp() AS at)
SELECT run.job_name, ${isoText('run.claimed_at')} AS claimed_at, ${isoText('run.occurrence')} AS occurrence, run.holder,
  ${isoText('run.finished_at')} AS finished_at, run.duration_ms, ${outcome} AS outcome, run.error,
  run.missed::float8 AS missed, run.catch_up
FROM ${quoteTable(historyTableOf(table))} AS run CROSS JOIN "db clock" AS clock
  LEFT JOIN ${quoteTable(table)} AS lease ON lease.job_name = run.job_name
WHERE ($1::text IS NULL OR run.job_name = $1::text) AND run.job_name ${NOT_DOCTOR}
  AND ($2::text IS NULL OR run.claimed_at < ${fromIsoText('$2')})
ORDER BY run.claimed_at DESC, run.job_name COLLATE "C"
LIMIT $3::integer`
}

// Savepoints queue by connection (src/query.ts). A pid is reused across servers: the server's start goes with it.
export const CONNECTION_SQL = `SELECT format('%s@%s', pg_backend_pid(), extract(epoch FROM pg_postmaster_start_time())) AS connection`

// Around a statement in a caller's transaction, so a failure never aborts it; the release keeps its row locks. One
// name is enough: while one is open, nothing else of the library's is in flight on its connection (src/query.ts).
export const SAVEPOINT_SQL = {
  open: 'SAVEPOINT pg_cron_lease',
  release: 'RELEASE SAVEPOINT pg_cron_lease',
  rollback: 'ROLLBACK TO SAVEPOINT pg_cron_lease',
}
