/** Every SQL text. Timestamps are `clock_timestamp()`: `NOW()` is the transaction's start; replicas' clocks differ. */
import { createHash } from 'node:crypto'
import { formatValue } from './format-value.js'

/** The table used when no `table` option is given. */
export const DEFAULT_TABLE = 'cron_leases'

// The schema is never pg_*: pg_temp is per session, so every replica would win every claim.
const TABLE_NAME = /^(?:(?!pg_)[A-Za-z_][A-Za-z0-9_$]*\.)?[A-Za-z_][A-Za-z0-9_$]*$/

/** What quoteTable accepts, in words, for error messages. */
export const TABLE_RULE = 'an identifier or schema.identifier ([A-Za-z_][A-Za-z0-9_$]*), the schema not named pg_*'

/**
 * Quotes a table name, optionally schema-qualified; only plain identifiers are accepted.
 *
 * @example
 * quoteTable('jobs.leases') // '"jobs"."leases"'
 */
export function quoteTable(table: string): string {
  if (typeof table !== 'string' || !TABLE_NAME.test(table)) {
    throw new TypeError(`pg-cron-lease: table must be ${TABLE_RULE}, got ${formatValue(table)}`)
  }
  return `"${table.replace('.', '"."')}"`
}

// Postgres cuts an identifier past 63 bytes (NAMEDATALEN - 1), so two long names could share one.
const IDENTIFIER_BYTES = 63

// `name` + `suffix`, in the schema of `table`; a name that would not fit is cut and given a hash of the whole.
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
 * The run history's table for a lease table: `name_runs` beside it, in the same schema. A name
 * that would pass Postgres's 63 bytes is cut and given a hash of the whole, so it stays distinct.
 *
 * @example
 * historyTableOf('jobs.leases') // 'jobs.leases_runs'
 */
export function historyTableOf(table: string): string {
  return besideTable(table, '_runs')
}

// The original package's shape: all a claim, renew and list need.
const LEASE_COLUMNS = `  job_name    TEXT PRIMARY KEY,
  lease_until TIMESTAMPTZ NOT NULL,
  holder      TEXT,
  claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()`

// Added by the current shape; all nullable, so adding them rewrites nothing. The last_* columns
// describe the job's last run: a claimant that records its runs marks it started (last_started_at),
// and its record ends it (last_finished_at); one started after the last end is running, or died.
const CURRENT_COLUMNS: readonly (readonly [name: string, type: string])[] = [
  ['last_started_at', 'TIMESTAMPTZ'], // the last run's claimed_at: the next claim minus it is the interval
  ['last_finished_at', 'TIMESTAMPTZ'], // when the last run that ended ended (for one that died, its lease)
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
]

/** Every column a table of the current shape has. */
export const CURRENT_COLUMN_NAMES: readonly string[] = CURRENT_COLUMNS.map(([name]) => name)

// What the run history adds to the lease row. Not among CURRENT_COLUMNS: a table upgraded before
// the history keeps its shape, and its claims.
const HISTORY_COLUMNS: readonly (readonly [name: string, type: string])[] = [
  ['run_number', 'BIGINT'], // the last run written to the history: a job's runs are numbered 1, 2, …
  ['failed_runs', 'BIGINT'], // how many of them were not ok: each such run is numbered among them too
  ['runs_trimmed', 'BIGINT'], // runs numbered up to this were trimmed or kept: the next trim starts above
  ['unfinished_runs', 'BIGINT'], // how many of the job's runs died: a counter, never trimmed
]

// One row per run, numbered per job in the order the runs were written; a run that was not ok is
// also numbered among those (failure_number), so the trim can tell which are its last M without a
// scan. started_at is claimed_at, as the tick starts on the claim.
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

// The interval, declared else observed; NULL for 0, which would divide by zero.
function every(parameter: string): string {
  return `nullif(coalesce(${parameter}::float8, lease.every_ms), 0)`
}

// How far a due time moves to the first occurrence at or after `end` on its schedule (every
// `interval` ms from it), or to `end` itself with no interval; backwards when it lies past `end`.
function toFirstDue(due: string, end: string, interval: string): string {
  const gap = `${end} - ${due}`
  return `coalesce(ceil(extract(epoch FROM ${gap}) * 1000 / ${interval}) * ${interval} * interval '1 millisecond', ${gap})`
}

// A pause is planned, not a failure: the occurrences that fall due while it holds are skipped, not
// missed. pauseSql and resumeSql move the stored due time past it (so a claim counts from there);
// with no due time stored, the last claim plus the interval moves here, in listLeasesSql alone.
function dueAfterPause(due: string, interval: string): string {
  return `(${due} + CASE WHEN lease.paused_until > ${due} AND isfinite(lease.paused_until)
    THEN ${toFirstDue(due, 'lease.paused_until', interval)} ELSE interval '0' END)`
}

// A dollar-quote tag the body (table names may contain `$`) cannot close early.
function dollarQuoted(body: string, base: string): string {
  let tag = `$${base}$`
  for (let n = 1; body.includes(tag); n++) tag = `$${base}_${n}$`
  return `${tag}\n${body}${tag}`
}

// The history table, and its index of the runs that were not ok (the trim drops the oldest of them
// by their number), when missing; a racing creator is caught as in createTableSql.
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
  const columns = [
    LEASE_COLUMNS,
    ...[...CURRENT_COLUMNS, ...HISTORY_COLUMNS].map(([name, type]) => `  ${name!.padEnd(18)} ${type}`),
  ]
  // The history only with a new lease table: for an existing one, this runs on every start and
  // must need no CREATE privilege (the history then comes with `pg-cron-lease migrate`).
  return doBlock(`BEGIN
  IF to_regclass('${t}') IS NULL THEN
    CREATE TABLE IF NOT EXISTS ${t} (
${columns.join(',\n').replace(/^/gm, '    ')}
    );
${createHistory(table).replace(/^(?=.)/gm, '    ')}  END IF;
${RACED}END;
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
  const added: readonly (readonly [string, string])[] = [...CURRENT_COLUMNS, ...HISTORY_COLUMNS]
  const names = added.map(([name]) => `'${name}'`).join(', ')
  const adds = added.map(([name, type]) => `      ADD COLUMN IF NOT EXISTS ${name} ${type}`)
  return doBlock(`BEGIN
  IF (SELECT count(*) FROM pg_attribute
      WHERE attrelid = '${t}'::regclass AND NOT attisdropped AND attname IN (${names})) < ${added.length} THEN
    ALTER TABLE ${t}
${adds.join(',\n')};
  END IF;
${createHistory(table).replace(/^(?=.)/gm, '  ')}${RACED}END;
`)
}

// Creators racing on one name: the one that lost is caught, as the other session made the table.
const RACED = `EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
  NULL; -- another session created it at the same moment
`

/**
 * The DDL for the default `cron_leases` table, as in `sql/cron_leases.sql`.
 *
 * @example
 * await pool.query(CRON_LEASES_TABLE_SQL)
 */
export const CRON_LEASES_TABLE_SQL: string = createTableSql(DEFAULT_TABLE)

function doBlock(body: string): string {
  return `DO ${dollarQuoted(`BEGIN\n${body}END\n`, 'pg_cron_lease')};\n`
}

/**
 * A catch-up: wins once the stored next due time passed unclaimed within `$4` ms (`$5` the next due
 * time in ms from now, `$6` the next occurrence, `$7` the interval; `$1`–`$3` as the claim's, and
 * for the `history` kind `$8` and `$9` as the claim's `$9` and `$10`). Compared in ms, as the clock
 * minus it could leave timestamp range. The lock sits last inside a CASE: an AND may evaluate it
 * first and cost a loser a transaction ID.
 */
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
  const returned = (row: string) =>
    `${isoText(`${row}.claimed_at`)} AS claimed_at, ${row}.last_missed AS missed, ${isoText(`${row}.last_occurrence`)} AS occurrence`
  if (kind !== 'history') return `${update}\nRETURNING ${returned('lease')}`
  return withRunRow(table, update, true, '$9', `${returned('claimed')}, claimed.run_number`)
}

// A length in ms as an interval, and the ms from one timestamp to a later one: said once each.
function ms(expression: string): string {
  return `${expression} * interval '1 millisecond'`
}

function msBetween(later: string, earlier: string): string {
  return `extract(epoch FROM ${later} - ${earlier}) * 1000`
}

// Seconds and ms apart: a float8 of seconds with a fraction is inexact past about year 3000.
function fromMs(parameter: string): string {
  return `(to_timestamp((${parameter} / 1000)::float8) + (${parameter} % 1000) * interval '1 millisecond')`
}

// The token travels as text: drivers round timestamptz to ms, and a fence would match the wrong claim.
const CLAIM_TOKEN = isoText('claimed_at')

// Shifted by interval, not zone name: on Postgres 18 a POSIX-form session zone can rename UTC.
function isoText(expression: string): string {
  return `to_char(${expression} AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
}

function isoTextOrInfinity(expression: string): string {
  return `CASE WHEN isfinite(${expression}) THEN ${isoText(expression)} ELSE ${expression}::text END`
}

// Read without zone, so the `Z` is not looked up among the session's abbreviations.
function fromIsoText(parameter: string): string {
  return `((${parameter}::text)::timestamp AT TIME ZONE INTERVAL '+00:00')`
}

/** The two shapes a lease table is used as: current, or the original package's. */
export type Shape = 'current' | 'original'

/**
 * The probe every claim on the current shape sends first: a row back means the claim cannot win
 * (the lease is held, or occurrence `$2` or a later one was claimed), so the loser stops at one
 * read-only statement. No row: the claim is sent.
 */
export function probeSql(table: string): string {
  return `SELECT true AS held FROM ${quoteTable(table)} AS lease
WHERE lease.job_name = $1::text
  AND (lease.lease_until > clock_timestamp() OR lease.last_occurrence >= ${fromMs('$2::bigint')})`
}

/**
 * What a claimant on the current shape writes besides its lease: nothing (`lease`: `record: false`),
 * its run in the lease row (`run`), or that and the run's row in the history (`history`).
 */
export type RunKind = 'lease' | 'run' | 'history'

/** Every claim text there is: the original shape's, and the current shape's of each {@link RunKind}. */
export type ClaimKind = 'original' | RunKind

// The last run a claimant that records its runs started has recorded no end: it runs, or it died.
function unended(alias: string): string {
  return `coalesce(${alias}.last_started_at > ${alias}.last_finished_at, ${alias}.last_started_at IS NOT NULL)`
}

// What a run that died reads as in last_error: it names its holder and when its lease ended.
function diedError(holder: string, lostAt: string): string {
  return `format('the run of %s had not ended when its lease ran out, by %s (its process died, or it lost the lease)',
    coalesce(${holder}, 'a replica'), ${isoText(lostAt)})`
}

// The job's last run number in its history, for a row that has none yet (a new row, or one made again).
function lastRunNumber(table: string): string {
  return `SELECT coalesce(max(run.run_number), 0) FROM ${quoteTable(historyTableOf(table))} AS run WHERE run.job_name = $1::text`
}

// What a claimant that records its runs writes as it wins (kinds `run` and `history`): this run
// started at `start`; the interval, declared (`interval`) else observed since the last run started;
// and the end of that last run if it recorded none, as `unfinished`: this claim won once its lease
// had ended, so its replica died or lost the lease. A `history` claimant also numbers the run
// (`number`), counts the one that died among the failures and the runs that died, and moves the
// trim on to the runs past the last `keep`.
function runStarted(kind: ClaimKind, start: string, interval: string, number: string, keep: string): string {
  if (kind !== 'run' && kind !== 'history') return ''
  const died = (then: string, otherwise: string) => `CASE WHEN ${unended('lease')} THEN ${then} ELSE ${otherwise} END`
  const observed = `CASE WHEN lease.last_started_at < ${start} THEN (${msBetween(start, 'lease.last_started_at')})::float8 END`
  const set = [
    `last_started_at = ${start}`,
    `every_ms = coalesce(${interval}::float8, ${observed}, lease.every_ms)`,
    `last_outcome = ${died("'unfinished'", 'lease.last_outcome')}`,
    `last_finished_at = ${died('lease.lease_until', 'lease.last_finished_at')}`,
    `last_duration_ms = ${died('NULL', 'lease.last_duration_ms')}`,
    `last_error = ${died(diedError('lease.holder', 'lease.lease_until'), 'lease.last_error')}`,
  ]
  if (kind === 'history') {
    set.push(
      `run_number = ${number}`,
      `failed_runs = coalesce(lease.failed_runs, 0) + ${died('1', '0')}`,
      `unfinished_runs = coalesce(lease.unfinished_runs, 0) + ${died('1', '0')}`,
      `runs_trimmed = greatest(coalesce(lease.runs_trimmed, 0), ${number} - ${keep}::integer)`,
    )
  }
  return `,\n  ${set.join(',\n  ')}`
}

// A `history` claimant's claim (`upsert`, an INSERT or UPDATE of the lease row without RETURNING)
// with its run: the run's row, started; the run before it marked `unfinished` if it never recorded an
// end (the lease row said so, and counted it); and the job's rows trimmed to its last `keep` runs and
// besides its last `keepFailed` not ok. The runs are found by number, so the trim costs the same at
// run 10 and at run 100,000; `before` holds where the last trim stopped.
function withRunRow(table: string, upsert: string, catchUp: boolean, keepFailed: string, output: string): string {
  const h = quoteTable(historyTableOf(table))
  // Each bound read once, as a scalar, so every run is found through the history's key: a join on
  // `claimed` would read every row the job keeps. No row claimed: NULL, and nothing matches.
  const of = (expression: string, from = 'claimed') => `(SELECT ${expression} FROM ${from})`
  const previous = `run.run_number = ${of('claimed.run_number - 1')}`
  const kept = of(`claimed.failed_runs - ${keepFailed}::integer`)
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
SELECT ${output} FROM claimed`
}

/**
 * The claim: the claim token to the single winner, no row to losers, who write nothing. On the
 * current shape `$4` is the occurrence (NULL: the lease alone), `$5` how far ahead of the database
 * clock it may lie, `$6` and `$7` the next due time (ms from now) and occurrence, `$8` the interval;
 * the `history` kind adds `$9` and `$10`, the runs to keep and the runs not ok to keep besides.
 */
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
  // Occurrences that fell due unclaimed, rounded (floor(x + 0.5): round() of a float8 takes a half to
  // the even neighbour), so half an interval of latency or offset never adds one. Counted from the
  // stored due time, which a pause moves past the occurrences it skips (pauseSql).
  const missed = `greatest(0, floor(${msBetween('coalesce(EXCLUDED.last_occurrence, EXCLUDED.claimed_at)', 'lease.next_due_at')} / ${every('$8')} + 0.5))::bigint`
  // A new row's run: started now, numbered on from the job's history (a row made again).
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
  const returned = (row: string) => `${isoText(`${row}.claimed_at`)} AS claimed_at, ${row}.last_missed AS missed`
  if (kind !== 'history') return `${upsert}\nRETURNING ${returned('lease')}`
  return withRunRow(table, upsert, false, '$10', `${returned('claimed')}, claimed.run_number`)
}

// A pause holds while the lease is still what the pause made it: any other writer of lease_until
// (the original package's renew) ends it, and that lease is then its holder's.
function pauseHolds(alias: string, now = 'clock.at'): string {
  return `coalesce(${alias}.paused_until > ${now} AND ${alias}.lease_until = GREATEST(${alias}.claim_until, ${alias}.paused_until), false)`
}

/** The fenced renew, and the beat (`$4`) that never moves the lease earlier; no row once the claim is gone. */
export function renewSql(table: string, shape: Shape): string {
  const paused = shape === 'current' ? `\n  AND NOT ${pauseHolds('lease', 'clock_timestamp()')}` : ''
  return `UPDATE ${quoteTable(table)} AS lease
SET lease_until = CASE WHEN $4::boolean
  THEN GREATEST(lease_until, clock_timestamp() + $2::integer * interval '1 millisecond')
  ELSE clock_timestamp() + $2::integer * interval '1 millisecond' END
WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$3')} AND lease_until > clock_timestamp()${paused}
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/** Why a renew matched no row, read only then: whose claim the row holds, and whether a pause or a lease holds it. */
export function lostLeaseSql(table: string, shape: Shape): string {
  const current = shape === 'current'
  return `SELECT lease.claimed_at = ${fromIsoText('$2')} AS same_claim,
  ${current ? pauseHolds('lease', 'clock_timestamp()') : 'false'} AS paused,
  ${current ? isoTextOrInfinity('lease.paused_until') : 'NULL::text'} AS paused_until,
  lease.lease_until > clock_timestamp() AS held
FROM ${quoteTable(table)} AS lease
WHERE lease.job_name = $1::text`
}

/** The fence: `FOR KEY SHARE` blocks only a claim's `FOR UPDATE`, not renews or beats; no row: it was replaced. */
export function fenceSql(table: string): string {
  return `SELECT true AS fenced FROM ${quoteTable(table)} AS lease
WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$2')}
FOR KEY SHARE`
}

// How a run ended, in the lease row: every record's part; `clock` is the database clock read once.
const RUN_ENDED = `last_finished_at = clock.at,
  last_duration_ms = $3::float8,
  last_outcome = $4::text,
  last_error = $5::text,
  last_success_at = CASE WHEN $4::text = 'ok' THEN clock.at ELSE lease.last_success_at END`

// The record's fence: the row still holds this run's claim.
const RECORD_FENCE = `lease.job_name = $1::text AND lease.claimed_at = ${fromIsoText('$2')}`

/**
 * Records how a won tick ended (`$3` its duration, `$4` its outcome, NULL when the scheduler cannot
 * say, `$5` its error), fenced on its claim (`$2`), in the lease row alone: for a run with no row in
 * the history (a table without it, `history: false`). Current shape only.
 */
export function recordOutcomeSql(table: string): string {
  return `UPDATE ${quoteTable(table)} AS lease
SET ${RUN_ENDED}
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE ${RECORD_FENCE}`
}

/**
 * {@link recordOutcomeSql}, and the run's row in the history (`$6` its number, as its claim returned
 * it) in the same statement: a run that failed is numbered among the failures, and those kept from
 * before past the last `$7` are trimmed. The row is written even once another claim replaced this
 * run's (its lease ran out mid-run): a run that ends late keeps its real outcome.
 */
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

// The doctor's race claims a job of its own (src/doctor.ts): never read as one of the user's.
const NOT_DOCTOR = `!~ '^pg-cron-lease:doctor:[0-9a-f]{16}$'`

/**
 * Every lease but the doctor's own, in byte order, judged by one clock read: one row with no job
 * for an empty table, so the clock is read all the same. `history`: the table counts the runs that
 * died (its run history's columns).
 */
export function listLeasesSql(table: string, shape: Shape, history = false): string {
  // Materialized, as a subquery could be rescanned; the space in its name keeps any table from shadowing it.
  const at = '"db clock".at'
  const current = shape === 'current'
  const column = (name: string, type: string) => (current ? `lease.${name}` : `NULL::${type}`)
  const pausedUntil = column('paused_until', 'timestamptz')
  const every = 'nullif(lease.every_ms, 0)'
  // With no due time stored (a scheduler that never named one), the last claim plus the interval.
  const base = `coalesce(lease.next_due_at, lease.claimed_at + ${ms(every)})`
  const nextDue = current ? dueAfterPause('lease.next_due_at', every) : 'NULL::timestamptz'
  const dueAt = current ? dueAfterPause(base, every) : 'NULL::timestamptz'
  // The end of a pause that has passed, until the job is claimed again.
  const resumedAt = current
    ? `CASE WHEN lease.paused_until <= ${at} AND lease.paused_until > lease.claimed_at THEN ${isoText('lease.paused_until')} END`
    : 'NULL::text'
  // The last run: ended, running while its claim's lease holds, else unfinished (its replica died or
  // lost the lease); a claim that marks no run (record: false, the original package) changes none.
  const lastRun = current
    ? `CASE WHEN NOT ${unended('lease')} THEN 'ended'
    WHEN lease.claimed_at = lease.last_started_at AND ${claimEnd('lease', at)} > ${at} THEN 'running'
    ELSE 'unfinished' END`
    : `'ended'`
  // When a run that died lost its lease: its own end, or at the latest the claim that replaced it.
  const lostAt = `CASE WHEN lease.claimed_at = lease.last_started_at THEN ${claimEnd('lease', at)} ELSE lease.claimed_at END`
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
  ${isoTextOrInfinity(pausedUntil)} AS paused_until,
  ${current ? pauseHolds('lease', at) : 'false'} AS paused,
  ${resumedAt} AS resumed_at,
  ${isoText(column('last_occurrence', 'timestamptz'))} AS last_occurrence,
  ${isoText(nextDue)} AS next_due_at,
  (${msBetween(at, dueAt)})::float8 AS since_due_ms,
  coalesce(${column('missed_occurrences', 'bigint')}, 0)::float8 AS missed,
  ${history ? `(coalesce(lease.unfinished_runs, 0) + ${died('1', '0')})::float8` : 'NULL::float8'} AS unfinished_runs
FROM "db clock" LEFT JOIN LATERAL (
  SELECT lease.*, ${lastRun.replace(/\n/g, '\n  ')} AS last_run
  FROM ${quoteTable(table)} AS lease
  WHERE lease.job_name ${NOT_DOCTOR}) AS lease ON true
ORDER BY lease.job_name COLLATE "C"`
}

function adminReturning(shape: Shape): string {
  // A pause that has ended is kept only for the due time (see resumeSql): the job is not paused.
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
function claimEnd(alias: string, now = 'clock.at'): string {
  return `CASE WHEN ${pauseHolds(alias, now)} THEN coalesce(${alias}.claim_until, ${now})
    ELSE ${alias}.lease_until END`
}

// The clock is read after the row lock, or a committing claim would be judged by an instant before it.
// The lock waits at most `wait` ms: a crashed holder's open transaction (an idle fence) holds it
// for ever. set_config(…, true) lasts to the end of the transaction, so the statement puts the
// caller's setting back once it has the lock (restoreLockTimeout); a 55P03 rolls it back.
function lockedClock(table: string, wait: string, gate = 'true'): string {
  return `was AS MATERIALIZED (SELECT current_setting('lock_timeout') AS lock_timeout),
waiting AS MATERIALIZED (SELECT set_config('lock_timeout', (${wait}::integer)::text, true) FROM was),
locked AS MATERIALIZED (SELECT lease.* FROM ${quoteTable(table)} AS lease
  WHERE lease.job_name = $1::text AND ${gate} AND EXISTS (SELECT FROM waiting) FOR UPDATE),
clock AS MATERIALIZED (SELECT clock_timestamp() AS at FROM (SELECT count(*) FROM locked) AS after_lock)`
}

const restoreLockTimeout = `set_config('lock_timeout', (SELECT lock_timeout FROM was), true) AS lock_timeout`

/**
 * Pauses a job; a running tick's renews then fail; `$4` the longest wait for the row lock, in ms.
 * A new pause first settles what was missed before it began (settle): the occurrences already due
 * and unclaimed are counted as missed now, and the job is next due at its first occurrence after
 * now. A pause with an end then moves that due time to the first occurrence at or after the end, so
 * that those falling due while it holds are skipped, not missed. Current shape only.
 */
export function pauseSql(table: string): string {
  const every = 'nullif(lease.every_ms, 0)'
  // Refused before locking: a refusal must not hold the row for the caller's transaction.
  const future = `($3::text IS NULL OR ${fromIsoText('$3')} > clock_timestamp())`
  // A pause ending after the last instant `new Date()` reads as ISO text is open-ended.
  return `WITH ${lockedClock(table, '$4', future)},
pause AS MATERIALIZED (
  SELECT CASE
    WHEN $2::float8 IS NOT NULL THEN
      CASE WHEN $2::float8 < (extract(epoch FROM '9999-12-31T23:59:59.999Z'::timestamptz - clock.at) * 1000)::float8
        THEN clock.at + $2::float8 * interval '1 millisecond'
        ELSE 'infinity'::timestamptz END
    WHEN $3::text IS NOT NULL THEN ${fromIsoText('$3')}
    ELSE 'infinity'::timestamptz END AS until
  FROM clock),
settle AS MATERIALIZED (
  SELECT coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / ${every}) + 1, 1)::bigint AS missed,
    coalesce((floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / ${every}) + 1) * ${every} * interval '1 millisecond',
      clock.at - lease.next_due_at) AS shift
  FROM locked AS lease CROSS JOIN clock
  WHERE NOT ${pauseHolds('lease')} AND lease.next_due_at <= clock.at),
moved AS MATERIALIZED (
  SELECT coalesce(settle.shift, interval '0') + CASE WHEN isfinite(pause.until) AND pause.until > due.at
      THEN ${toFirstDue('due.at', 'pause.until', every)} ELSE interval '0' END AS shift
  FROM locked AS lease CROSS JOIN pause LEFT JOIN settle ON true
    CROSS JOIN LATERAL (SELECT lease.next_due_at + coalesce(settle.shift, interval '0') AS at) AS due),
changed AS (
  UPDATE ${quoteTable(table)} AS lease
  SET claim_until = ${claimEnd('lease')},
    lease_until = GREATEST(${claimEnd('lease')}, pause.until),
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

/**
 * Ends a job's pause; a claim's own lease (claim_until) runs to its end. The job is next due at its
 * first occurrence at or after now (earlier than the end a pause set, when resumed before it), and
 * the end stays in paused_until, as a pause that lapses leaves it. `$2` the longest wait for the row
 * lock, in ms. Current shape only.
 */
export function resumeSql(table: string): string {
  const every = 'nullif(lease.every_ms, 0)'
  return `WITH ${lockedClock(table, '$2')},
before AS MATERIALIZED (
  SELECT ${pauseHolds('lease')} AS was_paused,
    CASE WHEN ${pauseHolds('lease')} THEN ${toFirstDue('lease.next_due_at', 'clock.at', every)} END AS shift
  FROM locked AS lease, clock),
changed AS (
  UPDATE ${quoteTable(table)} AS lease
  SET paused_until = CASE WHEN lease.paused_until > clock.at THEN clock.at ELSE lease.paused_until END,
    lease_until = CASE WHEN ${pauseHolds('lease')} THEN LEAST(lease.lease_until, GREATEST(${claimEnd('lease')}, clock.at))
      ELSE lease.lease_until END,
    next_due_at = lease.next_due_at + coalesce(before.shift, interval '0'),
    next_occurrence = lease.next_occurrence + coalesce(before.shift, interval '0')
  FROM clock LEFT JOIN before ON true
  WHERE lease.job_name = $1::text
  ${adminReturning('current')})
SELECT changed.*, coalesce(before.was_paused, false) AS was_paused, ${restoreLockTimeout}
FROM clock LEFT JOIN changed ON true LEFT JOIN before ON true`
}

/** Ends a job's current lease now; a pause is not lifted, and claim_until ends too; `$2` as resumeSql's. */
export function releaseSql(table: string, shape: Shape): string {
  const set =
    shape === 'current'
      ? `lease_until = CASE WHEN ${pauseHolds('lease')} THEN LEAST(lease.lease_until, lease.paused_until)
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

/**
 * Who holds a job's row lock, read after an admin statement's wait ran out (pg_locks lists no row
 * locks): the transaction whose xid is the row's xmax; else, as a locker under a savepoint (a
 * fence) leaves its subtransaction's xid there, every open transaction as old as that xid holding
 * a lock on the table. Several lockers share a multixact, which is not resolved.
 */
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

/**
 * The table's shape, whether it has the run history (`history_shape`: the table and the lease row's
 * columns for it) and this role may write it (`history`), and the database clock; read-only and
 * lockless (safe in a transaction).
 */
export function tableFactsSql(): string {
  return `SELECT to_regclass($1::text) IS NOT NULL AS exists,
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
    AND NOT attisdropped AND attname IN (${HISTORY_COLUMNS.map(([name]) => `'${name}'`).join(', ')})) = ${HISTORY_COLUMNS.length} AS shape) AS run`
}

/** The parameters of {@link tableFactsSql} for `table`. */
export function tableFactsParams(table: string): unknown[] {
  return [quoteTable(table), CURRENT_COLUMN_NAMES, quoteTable(historyTableOf(table))]
}

/**
 * The runs of every job (`$1` null) or one, newest first, before `$2` (ISO text; null: all), at
 * most `$3`. A run stored `running` runs while its claim's lease holds, and is `unfinished` once
 * that lease ended with no outcome: its replica died, or lost the lease.
 */
export function listRunsSql(table: string): string {
  const outcome = `CASE WHEN run.outcome <> 'running' THEN run.outcome
    WHEN lease.claimed_at = run.claimed_at AND ${claimEnd('lease')} > clock.at THEN 'running'
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

/**
 * The server connection a handle's statements run on, for a handle that is not itself one (an
 * adapter): savepoints queue by it (src/query.ts). A pid is reused across servers, so the server's
 * start goes with it; as epoch seconds, which no session setting changes.
 */
export function connectionSql(): string {
  return `SELECT format('%s@%s', pg_backend_pid(), extract(epoch FROM pg_postmaster_start_time())) AS connection`
}

/** Around a statement in a caller's transaction (src/query.ts), so a failure never aborts it. */
export function savepointSql(name: string): string {
  return `SAVEPOINT ${name}`
}

/** Keeps what the statement under the savepoint did, its row locks included. */
export function releaseSavepointSql(name: string): string {
  return `RELEASE SAVEPOINT ${name}`
}

/** Undoes the failed statement; the caller's transaction goes on. */
export function rollbackToSavepointSql(name: string): string {
  return `ROLLBACK TO SAVEPOINT ${name}`
}

/**
 * What `doctor` reads of the server and the session, in one read-only statement. The standbys
 * counted are those streaming from this server; without one, no failover can lose a commit here.
 */
export function serverFactsSql(): string {
  return `SELECT current_setting('server_version_num')::int AS version_num, current_user AS role,
  current_setting('server_version') AS version,
  pg_is_in_recovery() AS in_recovery,
  current_setting('transaction_read_only') AS read_only,
  current_setting('synchronous_commit') AS synchronous_commit,
  current_setting('synchronous_standby_names') AS synchronous_standby_names,
  (SELECT count(*) FROM pg_stat_replication)::int AS standbys,
  current_setting('statement_timeout') AS statement_timeout,
  current_setting('lock_timeout') AS lock_timeout,
  current_setting('idle_in_transaction_session_timeout') AS idle_in_transaction_session_timeout`
}

/**
 * The connecting role's privileges on the lease table (`$1`) and its history table (`$2`), a row
 * for each privilege of each table that exists. Claims need no DELETE on the lease table; only
 * the doctor's race does, to remove its own row.
 */
export function privilegesSql(): string {
  return `SELECT relation.kind, privilege, has_table_privilege(relation.oid, privilege) AS granted
FROM (VALUES ('lease', to_regclass($1::text)), ('history', to_regclass($2::text))) AS relation (kind, oid)
  CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS privilege
WHERE relation.oid IS NOT NULL`
}

/** The database clock alone, for the offset estimate over several round trips. */
export function databaseClockSql(): string {
  return `SELECT ${isoText('clock_timestamp()')} AS at`
}

/** The backend serving this statement, and a mark set earlier in its session (NULL if it has none). */
export function sessionProbeSql(): string {
  return `SELECT pg_backend_pid() AS pid, current_setting('pg_cron_lease.doctor', true) AS mark`
}

/** Marks the session (not the transaction): a pooler that moves the connection loses the mark. */
export function markSessionSql(): string {
  return `SELECT set_config('pg_cron_lease.doctor', $1::text, false) AS mark`
}

/** Deletes every row of one job (`$1`): the race of `doctor`, named so it touches no other. */
export function deleteJobSql(table: string): string {
  return `DELETE FROM ${quoteTable(table)} WHERE job_name = $1::text`
}
