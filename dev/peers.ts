/**
 * The patterns pg-cron-lease is compared with, written once and shared by `npm run bench` and
 * `npm run demo`. They are the usual ways of making a cron tick a singleton with Postgres; none of
 * them is part of the library.
 */
import type pg from 'pg'

/**
 * A table name quoted for SQL text, part by part. The bench and the demo name their own tables
 * (plain identifiers); nothing here takes the library's modules, so the bench loads one copy.
 */
export function quoteTable(table: string): string {
  return table
    .split('.')
    .map((part) => `"${part.replaceAll('"', '""')}"`)
    .join('.')
}

/**
 * A statement builder that builds once per table, as a program holds its statement in a constant:
 * rebuilding the text on every call would charge the pattern for string work the library, which
 * also builds its statements once per table, never does.
 */
function oncePerTable(build: (table: string) => string): (table: string) => string {
  const texts = new Map<string, string>()
  return (table) => {
    let text = texts.get(table)
    if (text === undefined) {
      text = build(table)
      texts.set(table, text)
    }
    return text
  }
}

/**
 * The plain single upsert, as the original package wrote it: `INSERT … VALUES … ON CONFLICT DO
 * UPDATE … WHERE lease_until <= clock_timestamp()`. It returns the same claim token as the
 * library's statement, so the two differ by the library's guard and by how each reads the clock.
 * A losing claim still takes the row lock (a transaction ID, WAL, a commit flush) before its WHERE
 * fails.
 * Parameters: $1 job name, $2 lease in ms, $3 holder.
 *
 * @example
 * await pool.query(plainUpsertSql('cron_leases'), ['report', 50_000, 'replica-1'])
 */
export const plainUpsertSql = oncePerTable((table) => {
  const t = quoteTable(table)
  return `INSERT INTO ${t} (job_name, lease_until, holder, claimed_at)
VALUES ($1::text, clock_timestamp() + $2::integer * interval '1 millisecond', $3::text, clock_timestamp())
ON CONFLICT (job_name) DO UPDATE
  SET lease_until = EXCLUDED.lease_until, holder = EXCLUDED.holder, claimed_at = EXCLUDED.claimed_at
  WHERE ${t}.lease_until <= clock_timestamp()
RETURNING to_char(claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS claimed_at`
})

/**
 * ShedLock's two statements (its plain JDBC storage): insert the lock row; when it already exists,
 * a unique violation, take it over with an update if it has expired. Parameters as above.
 *
 * @example
 * await pool.query(shedLockInsertSql('cron_leases'), ['report', 50_000, 'replica-1'])
 */
export const shedLockInsertSql = oncePerTable(
  (table) => `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder, claimed_at)
VALUES ($1::text, clock_timestamp() + $2::integer * interval '1 millisecond', $3::text, clock_timestamp())`,
)

/**
 * ShedLock's takeover of an expired lock row. Parameters as above.
 *
 * @example
 * await pool.query(shedLockUpdateSql('cron_leases'), ['report', 50_000, 'replica-1'])
 */
export const shedLockUpdateSql = oncePerTable(
  (table) => `UPDATE ${quoteTable(table)}
SET lease_until = clock_timestamp() + $2::integer * interval '1 millisecond', holder = $3::text, claimed_at = clock_timestamp()
WHERE job_name = $1::text AND lease_until <= clock_timestamp()`,
)

/**
 * ShedLock-style claim. `knownRows` plays ShedLock's in-process registry of rows it has already
 * created: for those it skips the insert and goes straight to the update. Pass a fresh set to
 * measure the first claim a process makes (insert, duplicate key, update).
 *
 * @example
 * const known = new Set<string>()
 * if (await shedLockClaim(pool, 'cron_leases', 'report', 50_000, 'replica-1', known)) await sendReport()
 */
export async function shedLockClaim(
  db: pg.Pool | pg.Client,
  table: string,
  jobName: string,
  leaseMs: number,
  holder: string,
  knownRows: Set<string>,
): Promise<boolean> {
  if (!knownRows.has(jobName)) {
    knownRows.add(jobName)
    try {
      await db.query(shedLockInsertSql(table), [jobName, leaseMs, holder])
      return true
    } catch (error) {
      if ((error as { code?: string }).code !== '23505') throw error
    }
  }
  const { rowCount } = await db.query(shedLockUpdateSql(table), [jobName, leaseMs, holder])
  return rowCount === 1
}

/**
 * Tries the session advisory lock of a job, keyed by `hashtext(job name)`: computed by the server,
 * so every replica agrees on the key.
 *
 * @example
 * await client.query(ADVISORY_TRY_LOCK_SQL, ['report'])
 */
export const ADVISORY_TRY_LOCK_SQL = 'SELECT pg_try_advisory_lock(hashtext($1::text)) AS locked'
/**
 * Releases the session lock taken by {@link ADVISORY_TRY_LOCK_SQL}.
 *
 * @example
 * await client.query(ADVISORY_UNLOCK_SQL, ['report'])
 */
export const ADVISORY_UNLOCK_SQL = 'SELECT pg_advisory_unlock(hashtext($1::text))'

/**
 * The advisory-lock pattern many posts give: take a pooled connection, try the session lock, run
 * the tick while holding it (and the connection), unlock, release. The lock is released when the
 * tick ends, so a replica whose timer fires a little later finds it free and runs the same
 * occurrence again.
 *
 * @example
 * const { ran } = await advisoryTick(pool, 'report', sendReport)
 */
export async function advisoryTick<T>(
  pool: pg.Pool,
  jobName: string,
  tick: () => Promise<T> | T,
): Promise<{ ran: true; result: T } | { ran: false; result: null }> {
  const client = await pool.connect()
  try {
    const { rows } = await client.query(ADVISORY_TRY_LOCK_SQL, [jobName])
    if (rows[0]?.locked !== true) return { ran: false, result: null }
    try {
      return { ran: true, result: await tick() }
    } finally {
      await client.query(ADVISORY_UNLOCK_SQL, [jobName])
    }
  } finally {
    client.release()
  }
}
