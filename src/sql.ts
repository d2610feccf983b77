/**
 * Every SQL text the library sends lives here, so the whole database contract can be read in one
 * place, as plain parameterised text (src/query.ts decides whether it goes prepared).
 *
 * Every timestamp is `clock_timestamp()`, the database's wall clock at the moment the statement
 * runs. `NOW()` would be the start of the caller's transaction, so a claim made through a client
 * whose transaction has been open for a while would measure the lease from a stale instant; the
 * replica's own clock would make the lease depend on every replica being in sync.
 */

import { createHash } from 'node:crypto'
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
 * The columns every lease table has had since the first release, the original package's shape:
 * all a claim, renew and list need. A table of only this shape keeps working, as the original
 * package uses it.
 */
const LEASE_COLUMNS = `  job_name    TEXT PRIMARY KEY,
  lease_until TIMESTAMPTZ NOT NULL,
  holder      TEXT,
  claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()`

/**
 * The columns the current shape adds, for the last outcome, pausing and occurrence keys: all
 * nullable, so adding them rewrites nothing, and replicas that never name them (the original
 * package) are unaffected.
 */
const CURRENT_COLUMNS: readonly (readonly [name: string, type: string])[] = [
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
  // When the job is next due, database clock: the winner's next occurrence, carried as a duration;
  // NULL when the last claim named none.
  ['next_due_at', 'TIMESTAMPTZ'],
  // That next occurrence as the schedule names it, exactly: what a catch-up run is keyed on.
  ['next_occurrence', 'TIMESTAMPTZ'],
  // Occurrences that fell due unclaimed: before the last claim, and in total.
  ['last_missed', 'BIGINT'],
  ['missed_occurrences', 'BIGINT'],
]

/** Every column a table of the current shape has (besides its claim function). */
export const CURRENT_COLUMN_NAMES: readonly string[] = CURRENT_COLUMNS.map(([name]) => name)

/**
 * The claim function of `table`, quoted: `<table>_claim` in the table's schema. A name too long
 * for Postgres (63 bytes) is cut and made unique with a hash of the table name, so two long
 * names never share one function (Postgres would cut both to the same name silently).
 */
export function claimFunction(table: string): string {
  const parts = quoteTable(table).slice(1, -1).split('"."')
  const name = parts.pop() as string
  const fitted =
    name.length + CLAIM_SUFFIX.length <= 63
      ? `${name}${CLAIM_SUFFIX}`
      : `${name.slice(0, 40)}_${createHash('sha256').update(name).digest('hex').slice(0, 16)}${CLAIM_SUFFIX}`
  return [...parts, fitted].map((part) => `"${part}"`).join('.')
}

const CLAIM_SUFFIX = '_claim'

/** The claim function's argument types, as `to_regprocedure` and `CREATE FUNCTION` name them. */
const CLAIM_ARGUMENTS =
  'text, integer, text, bigint, integer, double precision, bigint, double precision, double precision'

/**
 * Wraps a PL/pgSQL body in a DO statement, with a dollar-quote tag that the body (which holds a
 * table name, and table names may contain `$`) cannot close early.
 */
function dollarQuoted(body: string, base: string): string {
  let tag = `$${base}$`
  for (let n = 1; body.includes(tag); n++) tag = `$${base}_${n}$`
  return `${tag}\n${body}${tag}`
}

/**
 * The DDL that creates a lease table of the current shape and its claim function, safe to run on
 * every start by every replica at once:
 * - `CREATE TABLE IF NOT EXISTS` alone is not: sessions that race it fail with 23505 on the
 *   catalog's unique index (or 42P07), so the loser of that race is caught and ignored, and so is
 *   the loser of the race to create the function;
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
  const columns = [LEASE_COLUMNS, ...CURRENT_COLUMNS.map(([name, type]) => `  ${name.padEnd(18)} ${type}`)]
  return doBlock(`BEGIN
  IF to_regclass('${t}') IS NULL THEN
    CREATE TABLE IF NOT EXISTS ${t} (
${columns.join(',\n').replace(/^/gm, '    ')}
    );
  END IF;
EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
  NULL; -- another session created it at the same moment
END;
${createFunction(table)}`)
}

/**
 * The DDL that brings a lease table of an older shape to the current one: the columns it lacks,
 * then its claim function. Idempotent and safe when many replicas run it at once (ALTER TABLE takes
 * the table's lock, so they queue); when all is there it changes nothing, so a role that may only
 * use the table can run it too. Until it has run, the table is used as the original package uses
 * it: claims are decided by the lease alone, outcomes are not recorded, and pausing is refused with
 * a message that says to run it. `sql/cron_leases_upgrade.sql` holds it for the default table.
 *
 * @example
 * await pool.query(upgradeTableSql()) // replicas use the new shape within a minute, no restart
 */
export function upgradeTableSql(table: string = DEFAULT_TABLE): string {
  const t = quoteTable(table)
  const names = CURRENT_COLUMNS.map(([name]) => `'${name}'`).join(', ')
  const adds = CURRENT_COLUMNS.map(([name, type]) => `      ADD COLUMN IF NOT EXISTS ${name} ${type}`)
  return doBlock(`BEGIN
  IF (SELECT count(*) FROM pg_attribute
      WHERE attrelid = '${t}'::regclass AND NOT attisdropped AND attname IN (${names})) < ${CURRENT_COLUMNS.length} THEN
    ALTER TABLE ${t}
${adds.join(',\n')};
  END IF;
END;
${createFunction(table)}`)
}

/**
 * The DDL for the default `cron_leases` table; `sql/cron_leases.sql` holds the same text for
 * migration tools.
 *
 * @example
 * await pool.query(CRON_LEASES_TABLE_SQL)
 */
export const CRON_LEASES_TABLE_SQL: string = createTableSql(DEFAULT_TABLE)

function doBlock(body: string): string {
  return `DO ${dollarQuoted(`BEGIN\n${body}END\n`, 'pg_cron_lease')};\n`
}

/** The claim function's creation, inside the DDL's DO block: only when missing, a racing creator ignored. */
function createFunction(table: string): string {
  const f = claimFunction(table)
  return `BEGIN
  IF to_regprocedure('${f}(${CLAIM_ARGUMENTS})') IS NULL THEN
    CREATE FUNCTION ${f}(
      _job text, _lease_ms integer, _holder text, _occurrence_ms bigint, _tolerance_ms integer,
      _next_in_ms double precision, _next_occurrence_ms bigint, _every_ms double precision,
      _catch_up_ms double precision)
    RETURNS TABLE (claim_token text, missed bigint, occurrence text, interval_ms double precision)
    LANGUAGE plpgsql AS ${dollarQuoted(claimBody(table), 'claim')};
  END IF;
EXCEPTION WHEN unique_violation OR duplicate_function THEN
  NULL; -- another session created it at the same moment
END;
`
}

/**
 * The claim of a table of the current shape, as PL/pgSQL: what `claimSql` sends, and the floor for
 * a loser. Every claimant of a slot runs it; one gets a row back. A loser only reads the job's row
 * (no row lock, no transaction ID, no WAL) and returns before any `INSERT` is set up: opening the
 * table and its index for writing, on every execution, is what a losing `INSERT … ON CONFLICT`
 * costs even when its guard stops it. Plans inside a function are cached per connection, so a loser
 * behind a pooler that refuses prepared statements pays the parse and plan of one small call.
 *
 * The rules, one step each:
 * 1. A held lease, or an occurrence not later than the last one claimed: lose. The occurrence, or a
 *    later one, already ran, however late this claim comes.
 * 2. An occurrence further ahead of the database clock than the tolerance: lose. A replica whose
 *    clock runs fast must not run the future.
 * 3. An expired row that this claimant cannot lock at once (`SKIP LOCKED`): lose. It is locked by a
 *    claim racing this one, which wins or, if it fails, misses the occurrence rather than run it
 *    twice; or by `ctx.fence`'s `FOR KEY SHARE`, whose transaction still counts as the run.
 * 4. The upsert, whose `ON CONFLICT … WHERE` is the atomic arbiter, as in the original package's
 *    statement: it checks the lease and the occurrence again under the row lock. A racer of the
 *    job's first claim waits here for the first insert and then loses to it.
 *
 * A won claim measures its lease from the moment it wins. It stores the next due time (the next
 * occurrence, carried as a duration from this replica's clock so that clock offsets cancel) or
 * NULL when it names none, so no stale due time is left behind, and counts the occurrences that
 * fell due unclaimed since the stored one ({@link missedSince}).
 *
 * With `_catch_up_ms` it is the catch-up claim instead ({@link catchUpQuery}).
 */
function claimBody(table: string): string {
  const t = quoteTable(table)
  const occurrence = fromMs('_occurrence_ms')
  const missed = missedSince('coalesce(EXCLUDED.last_occurrence, EXCLUDED.claimed_at)', '_every_ms')
  return `#variable_conflict use_column
DECLARE
  _occurrence timestamptz := ${occurrence};
  _blocked boolean;
  _exists boolean;
BEGIN
  IF _catch_up_ms IS NOT NULL THEN
    RETURN QUERY ${catchUpQuery(table).replace(/\n/g, '\n    ')};
    RETURN;
  END IF;
  SELECT lease.lease_until > clock_timestamp() OR coalesce(lease.last_occurrence >= _occurrence, false)
    INTO _blocked FROM ${t} AS lease WHERE lease.job_name = _job;
  _exists := FOUND;
  IF _blocked THEN RETURN; END IF;
  IF _occurrence > clock_timestamp() + _tolerance_ms * interval '1 millisecond' THEN RETURN; END IF;
  IF _exists THEN
    PERFORM FROM ${t} AS lease WHERE lease.job_name = _job AND lease.lease_until <= clock_timestamp()
      FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN RETURN; END IF;
  END IF;
  RETURN QUERY
  INSERT INTO ${t} AS lease (job_name, lease_until, holder, claimed_at, last_occurrence, next_due_at,
    next_occurrence, last_missed, missed_occurrences)
  SELECT _job, clock.at + _lease_ms * interval '1 millisecond', _holder, clock.at, _occurrence,
    clock.at + _next_in_ms * interval '1 millisecond', ${fromMs('_next_occurrence_ms')}, 0, 0
  FROM (SELECT clock_timestamp() AS at) AS clock
  ON CONFLICT (job_name) DO UPDATE
  SET lease_until = clock_timestamp() + _lease_ms * interval '1 millisecond',
    holder = EXCLUDED.holder,
    claimed_at = EXCLUDED.claimed_at,
    last_occurrence = coalesce(EXCLUDED.last_occurrence, lease.last_occurrence),
    next_due_at = EXCLUDED.next_due_at,
    next_occurrence = EXCLUDED.next_occurrence,
    last_missed = ${missed},
    missed_occurrences = coalesce(lease.missed_occurrences, 0) + ${missed}
  WHERE lease.lease_until <= clock_timestamp()
    AND NOT coalesce(lease.last_occurrence >= EXCLUDED.last_occurrence, false)
  RETURNING ${isoText('lease.claimed_at')}, lease.last_missed, ${isoText('_occurrence')}, _every_ms;
END
`
}

/**
 * The catch-up claim, inside the claim function: wins only when the job's stored next due time
 * has passed with no claim since (a claim would have moved it or cleared it), the lease is not
 * held, and the latest occurrence due by now fell due no more than `_catch_up_ms` ago. Due-ness is
 * judged on the database clock (next_due_at plus whole intervals); the occurrence made up for is
 * named as the schedule names it (next_occurrence plus the same intervals), so a late replica
 * presenting that slot finds it run. The ones before it are counted as missed. The interval is the
 * caller's, else the table's every_ms; unknown, the due occurrence itself is made up for. The reply
 * carries the interval it stepped by, which the run records as the job's: the time since the last
 * run is an outage, not an interval.
 *
 * The window is compared in ms as a float, not subtracted from the clock: a window of any length
 * the checks accept (up to `Number.MAX_SAFE_INTEGER`) would put the timestamp out of range. A row
 * another statement holds `FOR UPDATE`, or fences `FOR KEY SHARE`, is skipped rather than waited
 * for; the lock is taken inside a CASE, after every other test, since Postgres may evaluate the
 * terms of an AND in any order and a lock taken first would be a loser's transaction ID.
 */
function catchUpQuery(table: string): string {
  const t = quoteTable(table)
  const every = 'nullif(coalesce(_every_ms, lease.every_ms), 0)'
  const ms = (expression: string) => `${expression} * interval '1 millisecond'`
  const skipped = `coalesce(floor(extract(epoch FROM clock.at - lease.next_due_at) * 1000 / ${every}), 0)`
  const steps = `coalesce(${ms(`${skipped} * ${every}`)}, interval '0')`
  const dueAt = `(lease.next_due_at + ${steps})`
  const slot = `(coalesce(lease.next_occurrence, lease.next_due_at) + ${steps})`
  return `UPDATE ${t} AS lease
SET lease_until = clock.at + ${ms('_lease_ms')},
  holder = _holder,
  claimed_at = clock.at,
  last_occurrence = ${slot},
  next_due_at = coalesce(clock.at + ${ms('_next_in_ms')}, ${dueAt} + ${ms(every)}),
  next_occurrence = coalesce(${fromMs('_next_occurrence_ms')}, ${slot} + ${ms(every)}),
  last_missed = ${skipped}::bigint,
  missed_occurrences = coalesce(lease.missed_occurrences, 0) + ${skipped}::bigint
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE lease.job_name = _job
  AND CASE WHEN lease.next_due_at <= clock.at AND lease.claimed_at < lease.next_due_at
      AND lease.lease_until <= clock.at
      AND extract(epoch FROM clock.at - ${dueAt}) * 1000 <= _catch_up_ms
      AND NOT coalesce(lease.last_occurrence >= ${slot}, false)
    THEN EXISTS (SELECT FROM ${t} AS locked WHERE locked.job_name = _job
      AND locked.lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
    ELSE false END
RETURNING ${isoText('lease.claimed_at')}, lease.last_missed, ${isoText('lease.last_occurrence')},
  coalesce(_every_ms, lease.every_ms)`
}

/**
 * How many occurrences fell due unclaimed between the job's stored next due time and `at` (the
 * occurrence now claimed, or the claim's own time when none is named), in intervals of `everyMs`
 * (the caller's, else the table's every_ms), rounded to the nearest: half an interval either way
 * of latency or clock offset never adds or drops one, and exactly half counts as one more. 0 while
 * either is unknown: the NULL they make is skipped by GREATEST.
 */
function missedSince(at: string, everyMs: string): string {
  const every = `nullif(coalesce(${everyMs}, lease.every_ms), 0)`
  // floor(x + 0.5), not round(): round() of a float8 takes a half to the even neighbour.
  return `greatest(0, floor(extract(epoch FROM ${at} - lease.next_due_at) * 1000 / ${every} + 0.5))::bigint`
}

/**
 * An instant sent as ms since the epoch, as a timestamptz. A number needs no reading by zone rules,
 * and every replica that names the same slot sends the same number. Whole seconds and the ms
 * apart: a float8 of seconds with a fraction is inexact past about year 3000. The instants are
 * whole ms from 1970 to 9999 (checked before they are sent), so integer division splits them
 * exactly.
 */
function fromMs(parameter: string): string {
  return `(to_timestamp((${parameter} / 1000)::float8) + (${parameter} % 1000) * interval '1 millisecond')`
}

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

/** The two shapes a lease table is used as: see {@link CURRENT_COLUMN_NAMES} and LEASE_COLUMNS. */
export type Shape = 'current' | 'original'

/**
 * The claim. One statement, no explicit transaction; one row (the claim token) to the single
 * winner, none to losers, who write nothing. Parameters: $1 job name, $2 lease in whole ms, $3
 * holder; on the current shape also $4 the occurrence in ms since the epoch or NULL (then the lease
 * decides alone), $5 how far ahead of the database clock an occurrence may lie in whole ms, $6 ms
 * from now until the next occurrence or NULL, $7 the next occurrence in ms since the epoch or NULL,
 * $8 the job's interval in ms or NULL, $9 the catch-up window in ms, or NULL for a claim.
 *
 * On the current shape it calls the table's claim function ({@link claimBody}, which holds every
 * rule). On the original shape it is the original package's rule, with its loser kept from writing:
 * - the guard reads the row once: a lease that is visibly held loses there, inserting and locking
 *   nothing; an expired row is tried only by a claimant that can lock it now (`SKIP LOCKED`, as in
 *   the function); no row yet (the job's first claim) is tried, and racers queue on the insert;
 * - `ON CONFLICT … WHERE lease_until <= clock_timestamp()` is the atomic arbiter.
 */
export function claimSql(table: string, shape: Shape): string {
  const t = quoteTable(table)
  if (shape === 'current') {
    return `SELECT claim_token AS claimed_at, missed, occurrence, interval_ms
FROM ${claimFunction(table)}($1::text, $2::integer, $3::text, $4::bigint, $5::integer, $6::float8, $7::bigint, $8::float8, $9::float8)`
  }
  return `INSERT INTO ${t} AS lease (job_name, lease_until, holder, claimed_at)
SELECT $1::text, clock.at + $2::integer * interval '1 millisecond', $3::text, clock.at
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE CASE (SELECT lease_until > clock_timestamp() FROM ${t} WHERE job_name = $1::text)
  WHEN true THEN false
  WHEN false THEN EXISTS (SELECT FROM ${t} WHERE job_name = $1::text AND lease_until <= clock_timestamp() FOR UPDATE SKIP LOCKED)
  ELSE true
END
ON CONFLICT (job_name) DO UPDATE
SET lease_until = clock_timestamp() + $2::integer * interval '1 millisecond',
  holder = EXCLUDED.holder,
  claimed_at = EXCLUDED.claimed_at
WHERE lease.lease_until <= clock_timestamp()
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/**
 * Whether a pause is in force at `now`: not over, and the lease still exactly what the pause made
 * it (the later of the claim's own end and the pause's). Any other writer of lease_until ends it:
 * in a mixed fleet, a renew by the original package knows nothing of pauses, and a claim can win
 * once such a renew has run out. From then on that lease is its holder's, and neither a resume nor
 * a replacing pause may cut it. (GREATEST skips a NULL claim_until: a pause made before the column.)
 */
function pauseHolds(alias: string, now = 'clock.at'): string {
  return `coalesce(${alias}.paused_until > ${now} AND ${alias}.lease_until = GREATEST(${alias}.claim_until, ${alias}.paused_until), false)`
}

/**
 * The fenced renew and the keep-alive beat: moves this claim's expiry to `$2` ms from now, or, for a
 * beat (`$4` true), to no earlier than that, so a beat never undoes a longer `renew(ms)` of the tick
 * itself. Parameters: $1 job name, $2 ms, $3 claim token, $4 whether it is a beat. Matches no row
 * once another claim (even one with the same holder name) has replaced this one, once the lease has
 * expired or been released, or, on the current shape, while a pause holds the job (a pause holds
 * the lease until its end, and a renew must not cut that short). The token is sent as text and cast
 * in SQL: a parameter the server types as timestamptz may be rounded to milliseconds by the driver.
 */
export function renewSql(table: string, shape: Shape): string {
  const paused = shape === 'current' ? `\n  AND NOT ${pauseHolds('lease', 'clock_timestamp()')}` : ''
  return `UPDATE ${quoteTable(table)} AS lease
SET lease_until = CASE WHEN $4::boolean
  THEN GREATEST(lease_until, clock_timestamp() + $2::integer * interval '1 millisecond')
  ELSE clock_timestamp() + $2::integer * interval '1 millisecond' END
WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$3')} AND lease_until > clock_timestamp()${paused}
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/**
 * The fence on the tick's own writes, run in the caller's transaction: `fenced` while the job's row
 * still carries this claim, and then the row stays locked until that transaction ends. Parameters:
 * $1 job name, $2 claim token. There is no `lease_until` condition: a lease that ran out with no
 * other claim since is still this claim's. One row always comes back: `in_transaction` is false
 * when the statement runs in no transaction block of its own (a pool, an adapter outside its
 * transaction): its first statement is the only one whose start is the transaction's, and a lock
 * taken there would end with the statement, fencing nothing. Then no lock is taken.
 *
 * Why `FOR KEY SHARE`, the weakest row lock: it conflicts only with `FOR UPDATE`, which is what
 * the claim takes (`FOR UPDATE SKIP LOCKED`), so every claim of this package skips the locked row
 * and loses until the transaction ends. The claim's own renew and keep-alive beats are UPDATEs of
 * no key column, which lock the row `FOR NO KEY UPDATE`, and that does not conflict: they go on
 * without waiting, from any connection. `FOR SHARE` would make them wait for the transaction. What
 * it does not stop is the original package's plain upsert: its ON CONFLICT DO UPDATE changes no
 * key column either, so only an unexpired lease keeps it from winning
 * (docs/failure-modes.md#fenced-writes).
 */
export function fenceSql(table: string): string {
  return `SELECT transaction_timestamp() < statement_timestamp() AS in_transaction,
  CASE WHEN transaction_timestamp() < statement_timestamp() THEN EXISTS (
    SELECT FROM ${quoteTable(table)} AS lease
    WHERE job_name = $1::text AND claimed_at = ${fromIsoText('$2')}
    FOR KEY SHARE) END AS fenced`
}

/**
 * Records how a won tick ended, fenced on its claim: a tick whose lease was taken over records
 * nothing over its successor's row. It never touches the lease. Parameters: $1 job name, $2 claim
 * token, $3 duration in ms, $4 'ok', 'error' or NULL, $5 the error's first line or NULL, $6 the
 * declared interval in ms or NULL. Without a declared interval the job's is the time between this
 * claim and the claim of the run recorded before it. Sent only to a table of the current shape.
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
 * `since_due_ms` is how long ago the job's next due time passed (negative while it is ahead): a
 * claim moves it or clears it, so a positive value means no claim since it fell due, whenever it
 * was stored. On the original shape the optional columns read as NULL.
 */
export function listLeasesSql(table: string, shape: Shape): string {
  const at = '"db clock".at'
  const column = (name: string, type: string) => (shape === 'current' ? `lease.${name}` : `NULL::${type}`)
  const nextDue = column('next_due_at', 'timestamptz')
  const pausedUntil = column('paused_until', 'timestamptz')
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
  ${column('last_outcome', 'text')} AS last_outcome,
  ${isoText(column('last_finished_at', 'timestamptz'))} AS last_finished_at,
  ${column('last_duration_ms', 'float8')} AS last_duration_ms,
  ${column('last_error', 'text')} AS last_error,
  ${isoText(column('last_success_at', 'timestamptz'))} AS last_success_at,
  ${column('every_ms', 'float8')} AS every_ms,
  ${isoTextOrInfinity(pausedUntil)} AS paused_until,
  ${shape === 'current' ? pauseHolds('lease', at) : 'false'} AS paused,
  ${isoText(column('last_occurrence', 'timestamptz'))} AS last_occurrence,
  ${isoText(nextDue)} AS next_due_at,
  (extract(epoch FROM ${at} - ${nextDue}) * 1000)::float8 AS since_due_ms,
  coalesce(${column('missed_occurrences', 'bigint')}, 0)::float8 AS missed
FROM ${quoteTable(table)} AS lease CROSS JOIN "db clock"
ORDER BY lease.job_name COLLATE "C"`
}

// What an admin statement returns: the job's lease and pause after the change, and when (by the
// database clock) the change was made.
function adminReturning(shape: Shape): string {
  const pausedUntil = shape === 'current' ? isoTextOrInfinity('lease.paused_until') : 'NULL::text'
  return `RETURNING lease.job_name,
    ${isoTextOrInfinity('lease.lease_until')} AS lease_until,
    ${pausedUntil} AS paused_until,
    ${isoText('clock.at')} AS checked_at`
}

/**
 * The last instant every reader can take as ISO text: `new Date()` reads four-digit years only
 * (beyond them it wants the `+YYYYYY` form, which Postgres does not write). A pause that would end
 * later is open-ended instead.
 */
export const LAST_INSTANT = '9999-12-31T23:59:59.999Z'

/**
 * Where the running claim's own lease ends: its lease_until, unless a pause holds that, in which
 * case the pause kept the claim's end in claim_until. A pause with no claim_until (made before the
 * column existed) kept nothing, and the claim's end is taken as now.
 */
function claimEnd(alias: string): string {
  return `CASE WHEN ${pauseHolds(alias)} THEN coalesce(${alias}.claim_until, clock.at)
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
 * then (claimants of any version respect it, as long as no renew of the original package moves
 * the lease; see docs/operations.md). A tick running at that moment keeps running, but its renew
 * and keep-alive beats now fail, so its `ctx.signal` aborts. Parameters: $1 job name, $2 pause
 * length in ms or NULL, $3 end as ISO-8601 UTC text or NULL; neither: open-ended ('infinity').
 * Current shape only.
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
  ${adminReturning('current')})
SELECT changed.*, pause.until > clock.at AS in_future, ${isoText('clock.at')} AS clock_at
FROM clock CROSS JOIN pause LEFT JOIN changed ON true`
}

/**
 * Ends a job's pause: it is claimable at once, unless a claim still holds its own lease (kept in
 * claim_until), which then runs to its end. A pause that already ran out is only cleared.
 * Parameter: $1 job name. Current shape only. `was_paused` says whether a pause was in force just
 * before the change (the row as locked).
 */
export function resumeSql(table: string): string {
  return `WITH ${lockedClock(table)},
before AS MATERIALIZED (SELECT ${pauseHolds('lease')} AS was_paused FROM locked AS lease, clock),
changed AS (
  UPDATE ${quoteTable(table)} AS lease
  SET paused_until = NULL,
    lease_until = CASE WHEN ${pauseHolds('lease')} THEN LEAST(lease.lease_until, GREATEST(${claimEnd('lease')}, clock.at))
      ELSE lease.lease_until END
  FROM clock
  WHERE lease.job_name = $1::text
  ${adminReturning('current')})
SELECT changed.*, coalesce(before.was_paused, false) AS was_paused
FROM clock LEFT JOIN changed ON true LEFT JOIN before ON true`
}

/**
 * Ends a job's current lease now, for a holder that crashed with a long lease; the job is
 * claimable at once. A pause is not lifted: the lease then ends when the pause does, and the
 * claim's own end (claim_until) is ended too, so a later resume does not give it back. A tick that
 * is still running finds its renew and keep-alive beats failing, so its `ctx.signal` aborts.
 * Parameter: $1 job name. Either shape: the original one has no pauses.
 */
export function releaseSql(table: string, shape: Shape): string {
  const set =
    shape === 'current'
      ? `lease_until = CASE WHEN ${pauseHolds('lease')} THEN LEAST(lease.lease_until, lease.paused_until)
  ELSE LEAST(lease.lease_until, clock.at) END,
  claim_until = LEAST(lease.claim_until, clock.at)`
      : 'lease_until = LEAST(lease.lease_until, clock.at)'
  return `WITH ${lockedClock(table)}
UPDATE ${quoteTable(table)} AS lease
SET ${set}
FROM clock
WHERE lease.job_name = $1::text
${adminReturning(shape).replace(/^ {2}/gm, '')}`
}

/**
 * What the library needs to know of a table, read from the catalog, and the database clock: one
 * read-only statement that cannot fail on a missing table (`exists` is then false) and takes no
 * lock, so it is safe inside a caller's transaction. `current` is true when the table has every
 * column of the current shape and its claim function. Parameters: $1 the table and $2 its claim
 * function's signature, quoted as {@link tableFactsParams} makes them. `checked_at` is what an end
 * of pause is compared with, what `check` reports on an empty table, and what a replica whose
 * claims keep losing estimates its clock offset from.
 */
export function tableFactsSql(): string {
  return `SELECT to_regclass($1::text) IS NOT NULL AS exists,
  (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1::text) AND attnum > 0 AND NOT attisdropped)::int AS columns,
  (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1::text) AND NOT attisdropped
    AND attname = ANY ($3::text[]))::int = cardinality($3::text[])
    AND to_regprocedure($2::text) IS NOT NULL AS current,
  ${isoText('clock_timestamp()')} AS checked_at`
}

/** The parameters of {@link tableFactsSql} for `table`. */
export function tableFactsParams(table: string): unknown[] {
  return [quoteTable(table), `${claimFunction(table)}(${CLAIM_ARGUMENTS})`, CURRENT_COLUMN_NAMES]
}

/**
 * The savepoint around a statement sent inside a caller's transaction (src/query.ts): its failure
 * is rolled back to it, so the caller's transaction is never left aborted. `name` is the library's
 * own, `pg_cron_lease_<n>`.
 */
export function savepointSql(name: string): string {
  return `SAVEPOINT ${name}`
}

/** Keeps what the statement under {@link savepointSql} did, its row locks included. */
export function releaseSavepointSql(name: string): string {
  return `RELEASE SAVEPOINT ${name}`
}

/** Undoes the failed statement under {@link savepointSql}; the caller's transaction goes on. */
export function rollbackToSavepointSql(name: string): string {
  return `ROLLBACK TO SAVEPOINT ${name}`
}
