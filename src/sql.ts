/**
 * Every SQL text the library sends lives here, so the whole database contract can be read in one
 * place, as plain parameterised text (src/query.ts decides whether it goes prepared).
 *
 * Every timestamp is `clock_timestamp()`, the database's wall clock at the moment the statement
 * runs. `NOW()` would be the start of the caller's transaction, so a claim made through a client
 * whose transaction has been open for a while would measure the lease from a stale instant; the
 * replica's own clock would make the lease depend on every replica being in sync.
 */

import { formatValue } from './format-value.js'

/** The table used when no `table` option is given. */
export const DEFAULT_TABLE = 'cron_leases'

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/

/** What quoteTable accepts, in words, for error messages. */
export const TABLE_RULE = 'an identifier or schema.identifier ([A-Za-z_][A-Za-z0-9_$]*), the schema not named pg_*'

/**
 * Quotes a table name, optionally schema-qualified, for use in SQL text. Only plain identifiers
 * are accepted, so the result is safe to splice into a statement.
 *
 * @example
 * quoteTable('cron_leases') // '"cron_leases"'
 * quoteTable('jobs.leases') // '"jobs"."leases"'
 * quoteTable('x; DROP TABLE y') // throws TypeError
 * quoteTable('pg_temp.leases') // throws TypeError: one table per session is no lease
 */
export function quoteTable(table: string): string {
  const parts = typeof table === 'string' ? table.split('.') : []
  if (
    parts.length < 1 ||
    parts.length > 2 ||
    !parts.every((part) => IDENTIFIER.test(part)) ||
    // Schemas named pg_* belong to Postgres, and pg_temp is each session's own: a lease table
    // there exists once per connection, so every replica would win every claim.
    (parts.length === 2 && parts[0]?.startsWith('pg_'))
  ) {
    throw new TypeError(`pg-cron-lease: table must be ${TABLE_RULE}, got ${formatValue(table)}`)
  }
  return parts.map((part) => `"${part}"`).join('.')
}

/**
 * The columns every lease table has had since the first release: all the claim, renew and list
 * statements need. A table of only this shape keeps working; the columns below are optional.
 */
const LEASE_COLUMNS = `  job_name    TEXT PRIMARY KEY,
  lease_until TIMESTAMPTZ NOT NULL,
  holder      TEXT,
  claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()`

/**
 * The optional columns, for the last outcome, overdue detection and pausing: all nullable, so
 * adding them rewrites nothing, and replicas that never name them (older versions, the original
 * package) are unaffected. A table has none of them (the original shape), the outcome columns
 * (`RECORD_COLUMNS`), those and `claim_until` (`PAUSE_COLUMNS`), or all of them.
 */
const OPTIONAL_COLUMNS: readonly (readonly [name: string, type: string])[] = [
  // The claim (claimed_at) of the run recorded below; the next run's claim minus this one is the
  // job's observed interval.
  ['last_started_at', 'TIMESTAMPTZ'],
  ['last_finished_at', 'TIMESTAMPTZ'],
  ['last_duration_ms', 'DOUBLE PRECISION'],
  // 'ok', 'error', or NULL when the scheduler could not say (node-cron's coordinator).
  ['last_outcome', 'TEXT'],
  ['last_error', 'TEXT'],
  ['last_success_at', 'TIMESTAMPTZ'],
  // Declared by the caller, else observed between the last two recorded runs.
  ['every_ms', 'DOUBLE PRECISION'],
  // No claim succeeds before it: a pause holds the lease until then ('infinity' when open-ended).
  ['paused_until', 'TIMESTAMPTZ'],
  // While a pause holds lease_until: where the running claim's own lease ends (as its claim, renew
  // or beat last set it), so that ending the pause never cuts that claim short.
  ['claim_until', 'TIMESTAMPTZ'],
  // The scheduled time of the latest occurrence claimed: no claim of it, or of an earlier one, wins
  // again. Compared exactly, as the schedule names it (a slot, not any replica's clock).
  ['last_occurrence', 'TIMESTAMPTZ'],
  // When the job is next due, database clock: the winner's next occurrence, carried as a duration.
  ['next_due_at', 'TIMESTAMPTZ'],
  // That next occurrence as the schedule names it, exactly: what a catch-up run is keyed on.
  ['next_occurrence', 'TIMESTAMPTZ'],
  // Occurrences that fell due unclaimed: before the last claim, and in total.
  ['last_missed', 'BIGINT'],
  ['missed_occurrences', 'BIGINT'],
]

const columnNames = (from: number, to?: number) => OPTIONAL_COLUMNS.slice(from, to).map(([name]) => name)

/** The columns the outcome record writes: a table with all of them can record outcomes. */
export const RECORD_COLUMNS: readonly string[] = columnNames(0, 8)

/** The columns pausing writes: a table with all of them can be paused and resumed. */
export const PAUSE_COLUMNS: readonly string[] = columnNames(0, 9)

/** The columns occurrence keys write: a table with all of them keys its claims on the occurrence. */
export const OCCURRENCE_COLUMNS: readonly string[] = columnNames(9)

/**
 * Wraps a PL/pgSQL body in a DO statement, with a dollar-quote tag that the body (which holds a
 * table name, and table names may contain `$`) cannot close early.
 */
function doBlock(body: string): string {
  let tag = '$pg_cron_lease$'
  for (let n = 1; body.includes(tag); n++) tag = `$pg_cron_lease_${n}$`
  return `DO ${tag}\n${body}${tag};\n`
}

/**
 * The DDL that creates a lease table of the current shape, safe to run on every start by every
 * replica at once:
 * - `CREATE TABLE IF NOT EXISTS` alone is not: sessions that race it fail with 23505 on the
 *   catalog's unique index (or 42P07), so the loser of that race is caught and ignored;
 * - on an existing table it creates nothing and needs no `CREATE` privilege on the schema (which
 *   `CREATE TABLE IF NOT EXISTS` asks for even when the table exists), so a role that may only use
 *   the table can run it too.
 * It never changes an existing table; {@link upgradeTableSql} adds the new columns to an old one.
 *
 * @example
 * await pool.query(createTableSql('jobs.leases'))
 */
export function createTableSql(table: string = DEFAULT_TABLE): string {
  const t = quoteTable(table)
  const columns = [LEASE_COLUMNS, ...OPTIONAL_COLUMNS.map(([name, type]) => `  ${name.padEnd(18)} ${type}`)]
  return doBlock(`BEGIN
  IF to_regclass('${t}') IS NULL THEN
    CREATE TABLE IF NOT EXISTS ${t} (
${columns.join(',\n').replace(/^/gm, '    ')}
    );
  END IF;
EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
  NULL; -- another session created it at the same moment
END
`)
}

/**
 * The DDL that adds the optional columns (last outcome, interval, pause) that a lease table of an
 * older shape lacks. Idempotent and safe when many replicas run it at once (ALTER TABLE takes the
 * table's lock, so they queue); when every column is there it alters nothing, so a role that may
 * only use the table can run it too. Until it has run, claims work as before, outcomes are not
 * recorded, and pausing is refused with a message that says to run it. `sql/cron_leases_upgrade.sql` holds it for the default table.
 *
 * @example
 * await pool.query(upgradeTableSql()) // then `pg-cron-lease status` shows each job's last run
 */
export function upgradeTableSql(table: string = DEFAULT_TABLE): string {
  const t = quoteTable(table)
  const names = OPTIONAL_COLUMNS.map(([name]) => `'${name}'`).join(', ')
  const adds = OPTIONAL_COLUMNS.map(([name, type]) => `      ADD COLUMN IF NOT EXISTS ${name} ${type}`)
  return doBlock(`BEGIN
  IF (SELECT count(*) FROM pg_attribute
      WHERE attrelid = '${t}'::regclass AND NOT attisdropped AND attname IN (${names})) < ${OPTIONAL_COLUMNS.length} THEN
    ALTER TABLE ${t}
${adds.join(',\n')};
  END IF;
END
`)
}

/**
 * The DDL for the default `cron_leases` table; `sql/cron_leases.sql` holds the same text for
 * migration tools.
 *
 * @example
 * await pool.query(CRON_LEASES_TABLE_SQL)
 */
export const CRON_LEASES_TABLE_SQL: string = createTableSql(DEFAULT_TABLE)

// The claim token travels as text: drivers parse timestamptz into a millisecond Date, and a fence
// compared against a rounded value would match the wrong claim or none.
const CLAIM_TOKEN = isoText('claimed_at')

/**
 * A timestamptz as ISO-8601 UTC text with microseconds, the claim token's format. The shift to UTC
 * is by an interval, not a zone name: on Postgres 18 the abbreviations of a POSIX-form session
 * zone (`SET TimeZone = 'UTC+3'`) take precedence, so the zone named UTC would mean UTC+3.
 */
function isoText(expression: string): string {
  return `to_char(${expression} AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
}

/** {@link isoText} for a value that may be 'infinity' (an open-ended pause), written as such. */
function isoTextOrInfinity(expression: string): string {
  return `CASE WHEN isfinite(${expression}) THEN ${isoText(expression)} ELSE ${expression}::text END`
}

/**
 * A claim token (or any ISO text ending in `Z`) read back as a timestamptz. Read as a timestamp
 * without zone, the `Z` is ignored instead of looked up among the session's abbreviations, and the
 * UTC offset is applied by interval, for the same reason as in {@link isoText}.
 */
function fromIsoText(parameter: string): string {
  return `((${parameter}::text)::timestamp AT TIME ZONE INTERVAL '+00:00')`
}

/**
 * A paused job's end of pause, read through `to_jsonb` so the same text also runs on a table of
 * the original shape, which has no `paused_until` (the key is then absent: never paused).
 */
function pausedUntil(alias: string): string {
  return `(to_jsonb(${alias}) ->> 'paused_until')::timestamptz`
}

/**
 * The claim: one statement, no explicit transaction. Parameters: $1 job name, $2 lease in whole
 * milliseconds, $3 holder. Returns one row (the claim token) to the single winner, none to losers.
 *
 * - The guard in `WHERE CASE …` reads the job's row once and decides who may try at all; a loser
 *   that stops there inserts nothing and locks nothing: no transaction ID, no WAL, no commit flush.
 *   - A lease that is visibly held (true): lose.
 *   - No row yet (NULL, the job's first claim): try; racers of the first claim queue on the insert.
 *   - An expired row (false): try only if this claimant can lock it now (`FOR UPDATE SKIP
 *     LOCKED`). A claimant that finds it locked, in practice by a claim racing it, loses at once
 *     instead of waiting for that claim's commit and then locking the row for nothing; the claim
 *     holding the lock wins, or, if it fails, the occurrence is missed rather than run twice.
 * - `ON CONFLICT … WHERE lease_until <= clock_timestamp()`: the atomic arbiter, as in the original
 *   package's statement; only a claimant that still sees an expired lease under the row lock wins.
 * - `claimed_at` (the claim token) is read once, just before the claimant tries. The insert branch
 *   measures the lease from it, exactly `$2` ms. The update branch measures it from when it wins
 *   (never less than `$2` ms from `claimed_at`), so a claimant that waited on a racing first insert
 *   still gets its whole lease; without a subquery for it, which every loser would pay to set up.
 * - `recordable` and `keyed` tell the winner whether the table has the outcome and the occurrence
 *   columns (see hasColumns).
 * - The SQL carries no comments: it is sent on every tick by every replica.
 */
export function claimSql(table: string): string {
  const t = quoteTable(table)
  return `INSERT INTO ${t} AS lease (job_name, lease_until, holder, claimed_at)
SELECT $1::text, clock.at + $2::integer * interval '1 millisecond', $3::text, clock.at
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE CASE (SELECT lease_until > clock_timestamp() FROM ${t} WHERE job_name = $1::text)
  WHEN true THEN false
  WHEN false THEN EXISTS (SELECT 1 FROM ${t} WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
  ELSE true
END
ON CONFLICT (job_name) DO UPDATE
SET lease_until = clock_timestamp() + $2::integer * interval '1 millisecond',
  holder = EXCLUDED.holder,
  claimed_at = EXCLUDED.claimed_at
WHERE lease.lease_until <= clock_timestamp()
RETURNING ${CLAIM_TOKEN} AS claimed_at, ${hasColumns('lease', RECORD_COLUMNS)} AS recordable,
  ${hasColumns('lease', OCCURRENCE_COLUMNS)} AS keyed`
}

/**
 * The claim of an occurrence, on a table known to have the occurrence columns (a won claim said
 * so). Parameters: $1 job name, $2 lease in whole ms, $3 holder, $4 the occurrence in ms since the
 * epoch or NULL, $5 ms from now until the next occurrence (this replica's clock, carried as a
 * duration) or NULL, $6 the job's interval in ms or NULL (then the table's every_ms), $7 how far
 * ahead of the database clock an occurrence may lie, in whole ms, $8 the next occurrence in ms since
 * the epoch or NULL. One row to the winner, none to losers, who write nothing, as in
 * {@link claimSql}; on top of its rule:
 *
 * - An occurrence further ahead of the database clock than $7 never wins: a replica whose clock
 *   runs fast must not run the future.
 * - An occurrence not later than `last_occurrence` never wins: it, or a later one, already ran. The
 *   guard reads it from the same row as the lease, so a loser pays nothing more for it; the
 *   arbiter checks it again under the row lock.
 * - With $4 NULL the lease decides alone, as in claimSql, and the next due time is still kept.
 *
 * The reply carries `missed`: occurrences that fell due unclaimed before this one (see
 * {@link missedSince}). Every expression here is compiled on every claim, lost ones included, so
 * the occurrence is one parameter expression (see fromMs) and nothing is written as a CASE that a
 * GREATEST or a NULLIF does.
 */
export function occurrenceClaimSql(table: string): string {
  const t = quoteTable(table)
  const ms = (p: string) => `${p} * interval '1 millisecond'`
  const occurrence = fromMs('$4')
  return `INSERT INTO ${t} AS lease (job_name, lease_until, holder, claimed_at, last_occurrence, next_due_at, next_occurrence, last_missed, missed_occurrences)
SELECT $1::text, clock.at + ${ms('$2::integer')}, $3::text, clock.at, ${occurrence}, clock.at + ${ms('$5::float8')}, ${fromMs('$8')}, 0, 0
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE CASE WHEN coalesce(${occurrence} > clock_timestamp() + ${ms('$7::integer')}, false) THEN false
  ELSE CASE (SELECT lease_until > clock_timestamp() OR coalesce(last_occurrence >= ${occurrence}, false) FROM ${t} WHERE job_name = $1::text)
  WHEN true THEN false
  WHEN false THEN EXISTS (SELECT 1 FROM ${t} WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
  ELSE true
END END
ON CONFLICT (job_name) DO UPDATE
SET lease_until = clock_timestamp() + ${ms('$2::integer')},
  holder = EXCLUDED.holder,
  claimed_at = EXCLUDED.claimed_at,
${occurrenceSet('EXCLUDED.last_occurrence', 'EXCLUDED.claimed_at', 'EXCLUDED.next_due_at', 'EXCLUDED.next_occurrence', '$6')}
WHERE lease.lease_until <= clock_timestamp() AND NOT coalesce(lease.last_occurrence >= EXCLUDED.last_occurrence, false)
RETURNING ${CLAIM_TOKEN} AS claimed_at, ${hasColumns('lease', RECORD_COLUMNS)} AS recordable, lease.last_missed AS missed`
}

/**
 * An instant sent as ms since the epoch, as a timestamptz. A number needs no reading by zone rules,
 * every replica that names the same slot sends the same number, and an expression of parameters
 * alone keeps the guard's subquery one the planner runs once, before the row (read through a FROM
 * item instead, the subquery is correlated, and a loser pays for it).
 */
function fromMs(parameter: string): string {
  // Whole seconds and the ms apart: a float8 of seconds with a fraction is inexact past about year
  // 3000. The instants are whole ms from 1970 on (checked before they are sent), so integer
  // division splits them exactly.
  return `(to_timestamp((${parameter}::bigint / 1000)::float8) + (${parameter}::bigint % 1000) * interval '1 millisecond')`
}

/**
 * How many occurrences fell due unclaimed between the job's stored next due time and `at` (the
 * occurrence now claimed, or the database clock when none is named), in intervals of `everyMs`
 * (the caller's, else the table's every_ms), rounded to the nearest: half an interval either way
 * of latency or clock offset never adds or drops one, and exactly half counts as one more. 0 while
 * either is unknown: the NULL they make is skipped by GREATEST.
 */
function missedSince(at: string, everyMs: string): string {
  const every = `nullif(coalesce(${everyMs}::float8, lease.every_ms), 0)`
  // floor(x + 0.5), not round(): round() of a float8 takes a half to the even neighbour.
  return `greatest(0, floor(extract(epoch FROM ${at} - lease.next_due_at) * 1000 / ${every} + 0.5))::bigint`
}

/** The SET lines that key a won claim on its occurrence, from the row as it was before it. */
function occurrenceSet(
  occurrence: string,
  claimedAt: string,
  nextDueAt: string,
  nextOccurrence: string,
  everyMs: string,
): string {
  const missed = missedSince(`coalesce(${occurrence}, ${claimedAt})`, everyMs)
  return `  last_occurrence = coalesce(${occurrence}, lease.last_occurrence),
  next_due_at = ${nextDueAt},
  next_occurrence = ${nextOccurrence},
  last_missed = ${missed},
  missed_occurrences = coalesce(lease.missed_occurrences, 0) + ${missed}`
}

/**
 * The claim of an occurrence on a table whose shape is not known: {@link claimSql} with the same
 * rules as {@link occurrenceClaimSql}, but it reads `last_occurrence` through `to_jsonb`, so it runs
 * on every shape, and writes nothing a table may lack. Claims keyed by other replicas are kept to
 * from the first call on. Parameters: $1 job name, $2 lease ms, $3 holder, $4 the occurrence in ms
 * since the epoch, $5 the tolerance ahead of the database clock in ms. `keyed` tells the winner whether
 * the table has the occurrence columns; if it has, the winner keys its claim with
 * {@link keyClaimSql} before it runs.
 */
export function probingClaimSql(table: string): string {
  const t = quoteTable(table)
  const last = (alias: string) => `(to_jsonb(${alias}) ->> 'last_occurrence')::timestamptz`
  return `INSERT INTO ${t} AS lease (job_name, lease_until, holder, claimed_at)
SELECT $1::text, clock.at + $2::integer * interval '1 millisecond', $3::text, clock.at
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE CASE WHEN coalesce(${fromMs('$4')} > clock_timestamp() + $5::integer * interval '1 millisecond', false) THEN false
  ELSE CASE (SELECT lease_until > clock_timestamp() OR coalesce(${last('existing')} >= ${fromMs('$4')}, false) FROM ${t} AS existing WHERE job_name = $1::text)
  WHEN true THEN false
  WHEN false THEN EXISTS (SELECT 1 FROM ${t} WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
  ELSE true
END END
ON CONFLICT (job_name) DO UPDATE
SET lease_until = clock_timestamp() + $2::integer * interval '1 millisecond',
  holder = EXCLUDED.holder,
  claimed_at = EXCLUDED.claimed_at
WHERE lease.lease_until <= clock_timestamp() AND NOT coalesce(${last('lease')} >= ${fromMs('$4')}, false)
RETURNING ${CLAIM_TOKEN} AS claimed_at, ${hasColumns('lease', RECORD_COLUMNS)} AS recordable,
  ${hasColumns('lease', OCCURRENCE_COLUMNS)} AS keyed`
}

/**
 * Keys a claim won by {@link probingClaimSql} on its occurrence, fenced on that claim. Parameters:
 * $1 job name, $2 claim token, $3 the occurrence in ms since the epoch or NULL, $4 ms until the
 * next occurrence or NULL, $5 the interval in ms or NULL, $6 the next occurrence in ms since the
 * epoch or NULL. No row: the occurrence, or a later one, was claimed by a
 * replica that keys its claims since this claim was made, and this run must not happen.
 */
export function keyClaimSql(table: string): string {
  return `UPDATE ${quoteTable(table)} AS lease
SET
${occurrenceSet('clock.occurrence', 'lease.claimed_at', "clock.at + $4::float8 * interval '1 millisecond'", fromMs('$6'), '$5')}
FROM (SELECT clock_timestamp() AS at, ${fromMs('$3')} AS occurrence) AS clock
WHERE lease.job_name = $1::text AND lease.claimed_at = ${fromIsoText('$2')}
  AND NOT coalesce(lease.last_occurrence >= clock.occurrence, false)
RETURNING lease.last_missed AS missed`
}

/**
 * The catch-up claim: wins only when the job's next due time has passed with no claim since (a
 * claim would have moved it; one that did not, a claim naming no next occurrence, came after it
 * and is one), the lease is not held, and the latest occurrence due by now fell due no more than
 * $4 ms ago. Due-ness is judged on the database clock (next_due_at plus whole intervals); the
 * occurrence made up for is named as the schedule names it (next_occurrence plus the same
 * intervals), so a late replica presenting that slot finds it run. The ones before it are counted
 * as missed. Parameters: $1 job name, $2 lease ms, $3 holder, $4 window in ms, $5 ms until the next
 * occurrence or NULL (then one interval after the caught-up one), $6 the interval in ms or NULL
 * (then every_ms; unknown: the due occurrence itself), $7 the next occurrence in ms since the
 * epoch or NULL. Needs the occurrence columns. The reply carries the interval it stepped by, which
 * the run records as the job's: the time since the last run is an outage, not an interval.
 *
 * Its guard is the claim's: a row another statement holds `FOR UPDATE`, or fences `FOR KEY SHARE`
 * (ctx.fence), is skipped rather than waited for, and a racer that finds the row already moved
 * matches nothing without locking it. The lock is taken inside a CASE, after every other test:
 * Postgres may evaluate the terms of an AND in any order, and a lock taken by a term evaluated
 * first would be a loser's transaction ID (the claims' too-early test is placed so for the same
 * reason).
 */
export function catchUpSql(table: string): string {
  const t = quoteTable(table)
  const every = `nullif(coalesce($6::float8, lease.every_ms), 0)`
  const ms = (expression: string) => `${expression} * interval '1 millisecond'`
  const skipped = `coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / ${every}), 0)`
  const steps = `coalesce(${ms(`${skipped} * ${every}`)}, interval '0')`
  const dueAt = `(lease.next_due_at + ${steps})`
  const slot = `(coalesce(lease.next_occurrence, lease.next_due_at) + ${steps})`
  return `UPDATE ${t} AS lease
SET lease_until = clock.at + ${ms('$2::integer')},
  holder = $3::text,
  claimed_at = clock.at,
  last_occurrence = ${slot},
  next_due_at = coalesce(clock.at + ${ms('$5::float8')}, ${dueAt} + ${ms(every)}),
  next_occurrence = coalesce(${fromMs('$7')}, ${slot} + ${ms(every)}),
  last_missed = ${skipped}::bigint,
  missed_occurrences = coalesce(lease.missed_occurrences, 0) + ${skipped}::bigint
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE lease.job_name = $1::text
  AND CASE WHEN lease.next_due_at <= clock.at AND lease.claimed_at < lease.next_due_at
      AND lease.lease_until <= clock.at
      AND ${dueAt} >= clock.at - ${ms('$4::float8')}
      AND NOT coalesce(lease.last_occurrence >= ${slot}, false)
    THEN EXISTS (SELECT 1 FROM ${t} WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
    ELSE false END
RETURNING ${CLAIM_TOKEN} AS claimed_at, true AS recordable, lease.last_missed AS missed,
  ${isoText('lease.last_occurrence')} AS occurrence, coalesce($6::float8, lease.every_ms) AS every_ms`
}

/**
 * Whether the row of `alias` has every one of `columns`: how a won claim learns, in its own reply,
 * whether the table can take the outcome record. A table upgraded while replicas run is then used
 * as such from the next won claim on, and no statement ever names a column the table may lack.
 * RETURNING is computed for the winner's row only, so losers pay nothing for it.
 */
function hasColumns(alias: string, columns: readonly string[]): string {
  return `to_jsonb(${alias}) ?& ARRAY[${columns.map((name) => `'${name}'`).join(', ')}]`
}

// This claim ($3), still unexpired, and no pause in force (see pauseHolds: one that another writer
// of the lease has ended no longer stops this claim either).
const FENCE = `WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$3')} AND lease_until > clock_timestamp()
  AND NOT coalesce(${pausedUntil('lease')} > clock_timestamp()
    AND lease_until = GREATEST(${claimUntil('lease')}, ${pausedUntil('lease')}), false)`

/**
 * The fence on the tick's own writes, run in the caller's transaction: it matches the job's row
 * only while it still carries this claim, and locks it until that transaction ends. Parameters:
 * $1 job name, $2 claim token. No row: another claim has replaced this one. There is no
 * `lease_until` condition: a lease that ran out with no other claim since is still this claim's.
 *
 * Why `FOR KEY SHARE`, the weakest row lock: it conflicts only with `FOR UPDATE`, which is what
 * the claim's guard takes (`FOR UPDATE SKIP LOCKED`), so every claim of this package skips the
 * locked row and loses until the transaction ends. The claim's own renew and keep-alive beats are
 * UPDATEs of no key column, which lock the row `FOR NO KEY UPDATE`, and that does not conflict:
 * they go on without waiting, from any connection. `FOR SHARE` would make them wait for the
 * transaction. The lock stays on the row's new versions as those UPDATEs commit. What it does not
 * stop is the original package's plain upsert: its ON CONFLICT DO UPDATE changes no key column
 * either, so it too locks `FOR NO KEY UPDATE`, and only an unexpired lease keeps it from winning:
 * no row lock stops it without stopping this claim's renew, as both take the same one, unless
 * `claimed_at` is in a unique index (docs/failure-modes.md#fenced-writes).
 */
export function fenceSql(table: string): string {
  return `SELECT true AS fenced FROM ${quoteTable(table)} AS lease
WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$2')}
FOR KEY SHARE`
}

/**
 * The fenced renew: moves this claim's expiry to `ms` from now. Parameters: $1 job name, $2 ms,
 * $3 claim token. Matches no row once another claim (even one with the same holder name) has
 * replaced this one, once the lease has expired or been released, or while the job is paused (a
 * pause holds the lease until its end, and a renew must not cut that short). The token is sent as
 * text and cast in SQL: a parameter the server types as timestamptz may be rounded to
 * milliseconds by the driver.
 */
export function renewSql(table: string): string {
  return `UPDATE ${quoteTable(table)} AS lease
SET lease_until = clock_timestamp() + $2::integer * interval '1 millisecond'
${FENCE}
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/**
 * The keep-alive beat: like {@link renewSql}, but it never moves the expiry earlier, so a beat
 * cannot undo a longer `renew(ms)` made by the tick itself.
 */
export function extendSql(table: string): string {
  return `UPDATE ${quoteTable(table)} AS lease
SET lease_until = GREATEST(lease_until, clock_timestamp() + $2::integer * interval '1 millisecond')
${FENCE}
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/**
 * Records how a won tick ended, fenced on its claim: a tick whose lease was taken over records
 * nothing over its successor's row. It never touches the lease. Parameters: $1 job name, $2 claim
 * token, $3 duration in ms, $4 'ok', 'error' or NULL, $5 the error's first line or NULL, $6 the
 * declared interval in ms or NULL. Without a declared interval the job's is the time between this
 * claim and the claim of the run recorded before it. Needs the outcome columns (RECORD_COLUMNS),
 * so it is sent only when the won claim's reply said the table has them.
 */
export function recordOutcomeSql(table: string): string {
  return `UPDATE ${quoteTable(table)} AS lease
SET every_ms = coalesce($6::float8,
    CASE WHEN lease.last_started_at < lease.claimed_at
      THEN (extract(epoch FROM lease.claimed_at - lease.last_started_at) * 1000)::float8 END,
    lease.every_ms),
  last_started_at = lease.claimed_at,
  last_finished_at = clock.at,
  last_duration_ms = $3::float8,
  last_outcome = $4::text,
  last_error = $5::text,
  last_success_at = CASE WHEN $4::text = 'ok' THEN clock.at ELSE lease.last_success_at END
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE lease.job_name = $1::text AND lease.claimed_at = ${fromIsoText('$2')}`
}

// The optional columns that reading statements use. Read through jsonb_to_record, a column the
// table does not have comes back NULL, so one text serves tables of every shape.
const OUTCOME_RECORD = `jsonb_to_record(to_jsonb(lease)) AS extra(last_outcome text, last_finished_at timestamptz,
    last_duration_ms float8, last_error text, last_success_at timestamptz, every_ms float8, paused_until timestamptz,
    claim_until timestamptz, last_occurrence timestamptz, next_due_at timestamptz, missed_occurrences bigint)`

/**
 * Every lease in the table, one row per job, ordered by job name in byte order (`COLLATE "C"`, so
 * the order is the same on every server whatever its collation). No parameters.
 *
 * Everything time-based is computed here, against one `clock_timestamp()` read for the whole
 * list (`checked_at`): the replica's clock plays no part, and every row is judged at the same
 * instant. A materialized CTE is read once however the plan scans it; a subquery on the inner side
 * of a join could be rescanned, reading the clock again. Its name is quoted with a space, so no
 * table name `quoteTable` accepts can be shadowed by it. `held` is the negation of the claim's
 * expiry test (`lease_until <= clock_timestamp()`), and `remaining_ms` is rounded up, so a held
 * lease always shows at least 1 ms and an expired one 0 (an open-ended pause: Infinity).
 * `since_due_ms` is how long ago the job's next due time passed (negative while it is ahead),
 * while it is later than the last claim: a claim that names a next occurrence moves it, so a
 * positive value means no claim since it fell due. A due time not later than the last claim is
 * not one it made (a claim that named none came after it, or one whose next occurrence was already
 * past), and says nothing of when the job is due: NULL.
 */
export function listLeasesSql(table: string): string {
  const at = '"db clock".at'
  return `WITH "db clock" AS MATERIALIZED (SELECT clock_timestamp() AS at)
SELECT lease.job_name,
  lease.holder,
  ${isoText('lease.claimed_at')} AS claimed_at,
  ${isoTextOrInfinity('lease.lease_until')} AS lease_until,
  lease.lease_until > ${at} AS held,
  CASE WHEN NOT isfinite(lease.lease_until) THEN 'Infinity'::float8
    WHEN lease.lease_until > ${at} THEN ceil(extract(epoch FROM lease.lease_until - ${at}) * 1000)::float8
    ELSE 0::float8 END AS remaining_ms,
  ${isoText(at)} AS checked_at,
  (extract(epoch FROM ${at} - lease.claimed_at) * 1000)::float8 AS since_claim_ms,
  extra.last_outcome,
  ${isoText('extra.last_finished_at')} AS last_finished_at,
  extra.last_duration_ms,
  extra.last_error,
  ${isoText('extra.last_success_at')} AS last_success_at,
  extra.every_ms,
  ${isoTextOrInfinity('extra.paused_until')} AS paused_until,
  coalesce(extra.paused_until > ${at} AND lease.lease_until = GREATEST(extra.claim_until, extra.paused_until), false) AS paused,
  ${isoText('extra.last_occurrence')} AS last_occurrence,
  ${isoText('extra.next_due_at')} AS next_due_at,
  CASE WHEN extra.next_due_at > lease.claimed_at THEN (extract(epoch FROM ${at} - extra.next_due_at) * 1000)::float8 END AS since_due_ms,
  coalesce(extra.missed_occurrences, 0)::float8 AS missed
FROM ${quoteTable(table)} AS lease CROSS JOIN "db clock"
  CROSS JOIN LATERAL ${OUTCOME_RECORD}
ORDER BY lease.job_name COLLATE "C"`
}

// What an admin statement returns: the job's lease and pause after the change, and when (by the
// database clock) the change was made.
const ADMIN_RETURNING = `RETURNING lease.job_name,
    ${isoTextOrInfinity('lease.lease_until')} AS lease_until,
    ${isoTextOrInfinity(pausedUntil('lease'))} AS paused_until,
    ${isoText('clock.at')} AS checked_at`

/**
 * The last instant every reader can take as ISO text: `new Date()` reads four-digit years only
 * (beyond them it wants the `+YYYYYY` form, which Postgres does not write). A pause that would end
 * later is open-ended instead.
 */
export const LAST_INSTANT = '9999-12-31T23:59:59.999Z'

/**
 * Whether a pause is in force: not over, and the lease still exactly what the pause made it (the
 * later of the claim's own end and the pause's). Any other writer of lease_until ends it: in a
 * mixed fleet, a renew by the original package knows nothing of pauses, and a claim can win once
 * such a renew has run out. From then on that lease is its holder's, and neither a resume nor a
 * replacing pause may cut it. (GREATEST skips a NULL claim_until: a pause made before the column.)
 */
function pauseHolds(alias: string): string {
  const until = pausedUntil(alias)
  return `(${until} > clock.at AND ${alias}.lease_until = GREATEST(${claimUntil(alias)}, ${until}))`
}

/** A row's claim_until, read through `to_jsonb` so the text runs on every shape (NULL when absent). */
function claimUntil(alias: string): string {
  return `(to_jsonb(${alias}) ->> 'claim_until')::timestamptz`
}

/**
 * Where the running claim's own lease ends: its lease_until, unless a pause holds that, in which
 * case the pause kept the claim's end in claim_until. A pause with no claim_until (made before the
 * column existed) kept nothing, and the claim's end is taken as now.
 */
function claimEnd(alias: string): string {
  return `CASE WHEN ${pauseHolds(alias)} THEN coalesce(${claimUntil(alias)}, clock.at)
    ELSE ${alias}.lease_until END`
}

/**
 * The job's row, locked, and the database clock read after the lock was granted. An admin
 * statement that read the clock first and then waited for the row (a claim committing in that
 * moment) would judge the new row by an instant from before it: it could take a pause that has
 * just ended for one in force and cut the new claim's lease. Under READ COMMITTED the UPDATE that
 * follows sees the row as locked here.
 */
function lockedClock(table: string, gate = 'true'): string {
  return `locked AS MATERIALIZED (SELECT lease.* FROM ${quoteTable(table)} AS lease WHERE lease.job_name = $1::text AND ${gate} FOR UPDATE),
clock AS MATERIALIZED (SELECT clock_timestamp() AS at FROM (SELECT count(*) FROM locked) AS after_lock)`
}

/**
 * Pauses a job: no claim succeeds until the pause ends, because the pause holds the lease until
 * then (the claim statement is unchanged, so claimants of any version respect it, as long as no
 * renew of the original package moves the lease; see docs/operations.md). A tick running at that
 * moment keeps running, but its renew and keep-alive beats now fail, so its `ctx.signal` aborts.
 * Parameters: $1 job name, $2 pause length in ms or NULL, $3 end as ISO-8601 UTC text or NULL;
 * neither: open-ended ('infinity'). Needs every optional column (PAUSE_COLUMNS).
 *
 * One row always comes back: `in_future` is false when the end is not after the database clock,
 * and then nothing was written; the job's columns are NULL when it has no row.
 *
 * The running claim's own end is kept in claim_until, and the lease is the later of it and the
 * pause's end. So a pause replacing a pause can end it earlier or later, and neither ever
 * shortens the claim's own lease. A length that would end past {@link LAST_INSTANT} is
 * open-ended; it is compared in milliseconds first, as the timestamp itself would be out of range.
 */
export function pauseSql(table: string): string {
  // An end already past is refused before the row is locked: a refusal inside a caller's
  // transaction must not hold the row (and make every claim lose) until that transaction ends.
  const future = `($3::text IS NULL OR ${fromIsoText('$3')} > clock_timestamp())`
  return `WITH ${lockedClock(table, future)},
pause AS MATERIALIZED (
  SELECT CASE
    WHEN $2::float8 IS NOT NULL THEN
      CASE WHEN $2::float8 < (extract(epoch FROM '${LAST_INSTANT}'::timestamptz - clock.at) * 1000)::float8
        THEN clock.at + $2::float8 * interval '1 millisecond'
        ELSE 'infinity'::timestamptz END
    WHEN $3::text IS NOT NULL THEN ${fromIsoText('$3')}
    ELSE 'infinity'::timestamptz END AS until
  FROM clock),
changed AS (
  UPDATE ${quoteTable(table)} AS lease
  SET claim_until = ${claimEnd('lease')},
    lease_until = GREATEST(${claimEnd('lease')}, pause.until),
    paused_until = pause.until
  FROM clock, pause
  WHERE lease.job_name = $1::text AND pause.until > clock.at
  ${ADMIN_RETURNING})
SELECT changed.*, pause.until > clock.at AS in_future, ${isoText('clock.at')} AS clock_at
FROM clock CROSS JOIN pause LEFT JOIN changed ON true`
}

/**
 * Ends a job's pause: it is claimable at once, unless a claim still holds its own lease (kept in
 * claim_until), which then runs to its end. A pause that already ran out is only cleared.
 * Parameter: $1 job name. Needs the outcome columns (RECORD_COLUMNS); reads claim_until where
 * the table has it.
 *
 * `was_paused` says whether a pause was in force just before the change (the row as locked).
 */
export function resumeSql(table: string): string {
  const t = quoteTable(table)
  return `WITH ${lockedClock(table)},
before AS MATERIALIZED (SELECT ${pauseHolds('lease')} AS was_paused FROM locked AS lease, clock),
changed AS (
  UPDATE ${t} AS lease
  SET paused_until = NULL,
    lease_until = CASE WHEN ${pauseHolds('lease')} THEN LEAST(lease.lease_until, GREATEST(${claimEnd('lease')}, clock.at))
      ELSE lease.lease_until END
  FROM clock
  WHERE lease.job_name = $1::text
  ${ADMIN_RETURNING})
SELECT changed.*, coalesce(before.was_paused, false) AS was_paused
FROM clock LEFT JOIN changed ON true LEFT JOIN before ON true`
}

/**
 * Ends a job's current lease now, for a holder that crashed with a long lease; the job is
 * claimable at once. A pause is not lifted: the lease then ends when the pause does, and the
 * claim's own end (claim_until) is ended too, so a later resume does not give it back. A tick that
 * is still running finds its renew and keep-alive beats failing, so its `ctx.signal` aborts.
 * Parameter: $1 job name. `claimUntil`: whether the table has that column (any other shape works).
 */
export function releaseSql(table: string, claimUntil = true): string {
  const endClaim = claimUntil ? `,\n  claim_until = LEAST(lease.claim_until, clock.at)` : ''
  return `WITH ${lockedClock(table)}
UPDATE ${quoteTable(table)} AS lease
SET lease_until = CASE WHEN ${pauseHolds('lease')} THEN LEAST(lease.lease_until, ${pausedUntil('lease')})
  ELSE LEAST(lease.lease_until, clock.at) END${endClaim}
FROM clock
WHERE lease.job_name = $1::text
${ADMIN_RETURNING.replace(/^ {2}/gm, '')}`
}

/**
 * The table's columns, read from the catalog: what the admin statements need to know of its shape
 * before they name a column. It cannot fail on a missing table (`exists` is then false). Parameter:
 * $1 the table, quoted as `quoteTable` does.
 */
export function tableColumnsSql(): string {
  return `SELECT to_regclass($1::text) IS NOT NULL AS exists,
  coalesce(array_agg(attname::text), ARRAY[]::text[]) AS columns
FROM pg_attribute
WHERE attrelid = to_regclass($1::text) AND attnum > 0 AND NOT attisdropped`
}

/**
 * One reading of the database clock, in the format of every other timestamp: what a check reports
 * as its `checkedAt` when there is no row to carry one, what an end of pause is compared with, and
 * what a replica whose keyed claims lose estimates its clock offset from. No parameters.
 */
export function clockSql(): string {
  return `SELECT ${isoText('clock_timestamp()')} AS checked_at`
}
