/**
 * Inspecting the lease table: who holds which job, since when, and for how long, as the database
 * clock sees it.
 */
import { describe } from './describe.js'
import { listLeasesSql } from './sql.js'
import type { Queryable } from './types.js'
import { checkOptions, checkQueryable, checkTable } from './validate.js'

/**
 * One job's row in the lease table. Timestamps are ISO-8601 UTC text with microseconds, the same
 * format as the claim token (`ctx.claimToken`), so `claimedAt` of a row equals the token of the
 * claim that wrote it. `new Date(text)` gives a Date when milliseconds are enough.
 *
 * @example
 * const lease: LeaseInfo = {
 *   jobName: 'billing:hourly',
 *   holder: 'web-1:4242',
 *   claimedAt: '2026-11-29T22:00:00.012345Z',
 *   leaseUntil: '2026-11-29T22:50:00.012345Z',
 *   held: true,
 *   remainingMs: 2_820_000,
 *   checkedAt: '2026-11-29T22:03:00.012345Z',
 * }
 */
export interface LeaseInfo {
  /** The job name the lease is for. */
  jobName: string
  /** The holder name written by the last claim; `null` in a row written without one. */
  holder: string | null
  /** When the last claim was made (its claim token), database clock. */
  claimedAt: string
  /** When the lease ends, database clock. A lease is never released early, so this is its end. */
  leaseUntil: string
  /** Whether the lease is still held at `checkedAt`: a claim made then would lose. */
  held: boolean
  /** Whole milliseconds left at `checkedAt`, rounded up: at least 1 when held, 0 when not. */
  remainingMs: number
  /**
   * The database clock reading every row of one `listLeases` call was judged at (the same for all
   * rows). Compare `claimedAt` and `leaseUntil` with it, not with this process's clock.
   */
  checkedAt: string
}

/**
 * Options for {@link listLeases}. An unknown key is rejected, as everywhere in the library.
 *
 * @example
 * const opts: ListLeasesOptions = { table: 'jobs.leases' }
 */
export interface ListLeasesOptions {
  /** The lease table, `name` or `schema.name`. Default: `cron_leases`. */
  table?: string
}

const OPTION_KEYS = ['table'] as const

/**
 * Every lease in the table, one entry per job name, ordered by job name in byte order. `held` and
 * `remainingMs` are computed by the database in the same statement, at one instant of its clock
 * (`checkedAt`), so the answer does not depend on this process's clock. It only reads: nothing is
 * claimed, renewed or locked.
 *
 * Arguments are validated (TypeError) before the query; a driver error rejects unchanged; a
 * result without a `rows` array, or a row that does not have the expected columns, rejects with
 * a TypeError rather than giving a partial answer.
 *
 * @example
 * import { listLeases } from 'pg-cron-lease'
 *
 * const lease = (await listLeases(pool)).find((l) => l.jobName === 'billing:hourly')
 * if (lease?.held) console.log(`${lease.holder} holds it for ${lease.remainingMs} ms more`)
 */
export async function listLeases(db: Queryable, opts?: ListLeasesOptions): Promise<LeaseInfo[]> {
  checkQueryable(db)
  const options = checkOptions(opts, OPTION_KEYS)
  const table = checkTable(options.table)

  const result = (await db.query(listLeasesSql(table), [])) as { rows?: unknown } | null | undefined
  const rows = result?.rows
  if (!Array.isArray(rows)) {
    throw new TypeError(
      `pg-cron-lease: cannot list the leases in ${table}: the driver's result has no rows array, got ${describe(result)}`,
    )
  }
  return rows.map((row) => readLease(row, table))
}

// The statement returns text, boolean and float8 columns, which every driver seen maps to string,
// boolean and number. Anything else means a driver (or a table) this code does not understand, and
// a guess could report a held lease as free.
function readLease(row: unknown, table: string): LeaseInfo {
  const r = (row ?? {}) as Record<string, unknown>
  const bad = (column: string): never => {
    throw new TypeError(
      `pg-cron-lease: cannot read a lease row of ${table}: column ${column} has an unexpected value, got ${describe(row)}`,
    )
  }
  const text = (column: string): string => (typeof r[column] === 'string' ? (r[column] as string) : bad(column))
  const held = typeof r.held === 'boolean' ? r.held : bad('held')
  const raw = r.remaining_ms
  const remainingMs = typeof raw === 'number' ? raw : typeof raw === 'string' && raw !== '' ? Number(raw) : Number.NaN
  if (!Number.isInteger(remainingMs) || remainingMs < 0) bad('remaining_ms')
  const holder = r.holder === null ? null : text('holder')
  return {
    jobName: text('job_name'),
    holder,
    claimedAt: text('claimed_at'),
    leaseUntil: text('lease_until'),
    held,
    remainingMs,
    checkedAt: text('checked_at'),
  }
}
