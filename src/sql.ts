/**
 * Every SQL text the library sends lives here, so the whole database contract can be read in one
 * place. Statements are plain parameterised text: no named (prepared) statements, which break
 * under PgBouncer's transaction pooling.
 *
 * Every timestamp is `clock_timestamp()`, the database's wall clock at the moment the statement
 * runs. `NOW()` would be the start of the caller's transaction, so a claim made through a client
 * whose transaction has been open for a while would measure the lease from a stale instant; the
 * replica's own clock would make the lease depend on every replica being in sync.
 */

import { describe } from './describe.js'

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
    throw new TypeError(`pg-cron-lease: table must be ${TABLE_RULE}, got ${describe(table)}`)
  }
  return parts.map((part) => `"${part}"`).join('.')
}

/**
 * The `CREATE TABLE IF NOT EXISTS` statement for a lease table. The columns are the ones existing
 * installations already have, so an old table keeps working.
 *
 * @example
 * await pool.query(createTableSql('jobs.leases'))
 */
export function createTableSql(table: string = DEFAULT_TABLE): string {
  return `CREATE TABLE IF NOT EXISTS ${quoteTable(table)} (
  job_name    TEXT PRIMARY KEY,
  lease_until TIMESTAMPTZ NOT NULL,
  holder      TEXT,
  claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
`
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

/** A timestamptz column as ISO-8601 UTC text with microseconds, the claim token's format. */
function isoText(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
}

/**
 * The claim: one statement, no explicit transaction. Parameters: $1 job name, $2 lease in whole
 * milliseconds, $3 holder. Returns one row (the claim token) to the single winner, none to losers.
 *
 * - `WHERE NOT EXISTS`: a lease that is visibly held makes the SELECT empty, so a loser inserts
 *   nothing and locks nothing: no transaction ID, no WAL, no commit flush.
 * - `ON CONFLICT … WHERE lease_until <= clock_timestamp()`: the atomic arbiter when claimants race
 *   past that check. The row lock serialises them and only the first still sees an expired lease.
 * - Each branch reads the clock once, so the lease lasts exactly `$2` ms from `claimed_at`; the
 *   update branch reads it when it wins, so a claimant that waited on the row lock still gets its
 *   whole lease.
 * - The SQL carries no comments: it is sent on every tick by every replica.
 */
export function claimSql(table: string): string {
  const t = quoteTable(table)
  return `INSERT INTO ${t} (job_name, lease_until, holder, claimed_at)
SELECT $1::text, clock.at + $2::integer * interval '1 millisecond', $3::text, clock.at
FROM (SELECT clock_timestamp() AS at) AS clock
WHERE NOT EXISTS (SELECT 1 FROM ${t} WHERE job_name = $1::text AND lease_until > clock_timestamp())
ON CONFLICT (job_name) DO UPDATE
SET (lease_until, claimed_at) = (
    SELECT clock.at + $2::integer * interval '1 millisecond', clock.at FROM (SELECT clock_timestamp() AS at) AS clock
  ),
  holder = EXCLUDED.holder
WHERE ${t}.lease_until <= clock_timestamp()
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/**
 * The fenced renew: moves this claim's expiry to `ms` from now. Parameters: $1 job name, $2 ms,
 * $3 claim token. Matches no row once another claim (even one with the same holder name) has
 * replaced this one, or once the lease has expired. The token is sent as text and cast in SQL: a
 * parameter the server types as timestamptz may be rounded to milliseconds by the driver.
 */
export function renewSql(table: string): string {
  return `UPDATE ${quoteTable(table)}
SET lease_until = clock_timestamp() + $2::integer * interval '1 millisecond'
WHERE job_name = $1::text AND claimed_at = ($3::text)::timestamptz AND lease_until > clock_timestamp()
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/**
 * The keep-alive beat: like {@link renewSql}, but it never moves the expiry earlier, so a beat
 * cannot undo a longer `renew(ms)` made by the tick itself.
 */
export function extendSql(table: string): string {
  return `UPDATE ${quoteTable(table)}
SET lease_until = GREATEST(lease_until, clock_timestamp() + $2::integer * interval '1 millisecond')
WHERE job_name = $1::text AND claimed_at = ($3::text)::timestamptz AND lease_until > clock_timestamp()
RETURNING ${CLAIM_TOKEN} AS claimed_at`
}

/**
 * Every lease in the table, one row per job, ordered by job name in byte order (`COLLATE "C"`, so
 * the order is the same on every server whatever its collation). No parameters.
 *
 * `held` and `remaining_ms` are computed here, against one `clock_timestamp()` read for the whole
 * list (`checked_at`): the replica's clock plays no part, and every row is judged at the same
 * instant. A materialized CTE is read once however the plan scans it; a subquery on the inner side
 * of a join could be rescanned, reading the clock again. Its name is quoted with a space, so no
 * table name `quoteTable` accepts can be shadowed by it. `held` is the negation of the claim's
 * expiry test (`lease_until <= clock_timestamp()`), and `remaining_ms` is rounded up, so a held
 * lease always shows at least 1 ms and an expired one 0.
 */
export function listLeasesSql(table: string): string {
  return `WITH "db clock" AS MATERIALIZED (SELECT clock_timestamp() AS at)
SELECT job_name,
  holder,
  ${isoText('claimed_at')} AS claimed_at,
  ${isoText('lease_until')} AS lease_until,
  lease_until > "db clock".at AS held,
  CASE WHEN lease_until > "db clock".at
    THEN ceil(extract(epoch FROM lease_until - "db clock".at) * 1000)::float8
    ELSE 0::float8 END AS remaining_ms,
  ${isoText('"db clock".at')} AS checked_at
FROM ${quoteTable(table)} CROSS JOIN "db clock"
ORDER BY job_name COLLATE "C"`
}
