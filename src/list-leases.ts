/**
 * Inspecting the lease table: who holds which job, since when, and for how long, as the database
 * clock sees it.
 */
import { formatValue } from './format-value.js'
import { compileOptions } from './options.js'
import { runStatement } from './query.js'
import { listLeasesSql } from './sql.js'
import { shapeOf } from './table-facts.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkQueryable } from './validate.js'

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
 *   lastOutcome: 'ok',
 *   lastFinishedAt: '2026-11-29T21:00:04.210000Z',
 *   lastDurationMs: 4_180,
 *   lastError: null,
 *   lastSuccessAt: '2026-11-29T21:00:04.210000Z',
 *   everyMs: 3_600_000,
 *   overdue: false,
 *   paused: false,
 *   pausedUntil: null,
 *   lastOccurrence: '2026-11-29T22:00:00.000000Z',
 *   nextDueAt: '2026-11-29T23:00:00.004211Z',
 *   missed: 0,
 * }
 */
export interface LeaseInfo {
  /** The job name the lease is for. */
  jobName: string
  /** The holder name written by the last claim; `null` in a row written without one. */
  holder: string | null
  /** When the last claim was made (its claim token), database clock. */
  claimedAt: string
  /**
   * When the lease ends, database clock: `'infinity'` while an open-ended pause holds it. A claim
   * never ends it early; only `releaseLease` and `resumeJob` (or the CLI's release / resume) do.
   */
  leaseUntil: string
  /** Whether the lease is still held at `checkedAt`: a claim made then would lose. */
  held: boolean
  /**
   * Whole milliseconds left at `checkedAt`, rounded up: at least 1 when held, 0 when not,
   * `Infinity` under an open-ended pause (`null` in JSON).
   */
  remainingMs: number
  /**
   * The database clock reading every row of one `listLeases` call was judged at (the same for all
   * rows). Compare `claimedAt` and `leaseUntil` with it, not with this process's clock.
   */
  checkedAt: string
  /**
   * How the last recorded run ended: `'ok'`, `'error'`, or `null` (never recorded, recording off,
   * a table without the outcome columns, or a run of a node-cron task the coordinator does not watch).
   */
  lastOutcome: 'ok' | 'error' | null
  /** When the last recorded run settled, database clock; `null` if none was recorded. */
  lastFinishedAt: string | null
  /** How long the last recorded run took, in ms (this process's monotonic clock); `null` if none. */
  lastDurationMs: number | null
  /** For a last run that failed: `Name: first line of the message`, at most 500 characters. */
  lastError: string | null
  /** When a run last ended `ok`, database clock; `null` if none has. */
  lastSuccessAt: string | null
  /**
   * The job's interval in ms: declared by the caller (`everyMs`, or `forInterval`), else the gap
   * its scheduler gave between two occurrences, else observed between its last two recorded runs;
   * `null` while unknown.
   */
  everyMs: number | null
  /**
   * Not paused, and later than its due time by more than the grace, by the database clock at
   * `checkedAt`. Its due time is `nextDueAt` (passed with no claim since, whenever it was stored),
   * or, while none is stored, its last claim plus `everyMs`; with neither, never overdue. The grace
   * is `overdueGraceMs`, else `overdueFactor − 1` intervals of at most a minute each (see
   * {@link ListLeasesOptions}).
   */
  overdue: boolean
  /** The scheduled time of the latest occurrence claimed, as the scheduler named it; `null` if none. */
  lastOccurrence: string | null
  /**
   * When the job is next due, database clock: stored by the last claim from its scheduler's next
   * occurrence (or one `everyMs` on); `null` while unknown. In the past with no claim since: late.
   */
  nextDueAt: string | null
  /** The occurrences that fell due unclaimed, counted so far by the claims after them (0 if none, or unknown). */
  missed: number
  /** A pause (`pauseJob`, `pg-cron-lease pause`) holds the job at `checkedAt`: nobody can claim it. */
  paused: boolean
  /** When the pause ends, database clock (`'infinity'` when open-ended); `null` when not paused. */
  pausedUntil: string | null
}

/**
 * Options for {@link listLeases}. An unknown key is rejected, as everywhere in the library.
 *
 * @example
 * const opts: ListLeasesOptions = { table: 'jobs.leases' }
 */
export interface ListLeasesOptions extends Pick<LeaseOptions, 'table'> {
  /**
   * How many grace units past its due time a job may be before it is overdue, plus one: the
   * grace, when `overdueGraceMs` is not given, is `overdueFactor − 1` times the job's interval, at
   * most a minute ({@link DEFAULT_OVERDUE_GRACE_MS}; a minute while the interval is unknown).
   * Default: 2, one unit. At least 1 (no grace).
   */
  overdueFactor?: number
  /**
   * How long past its due time a job may go unclaimed before it is overdue, in ms, whatever the
   * factor. Default: see `overdueFactor`.
   */
  overdueGraceMs?: number
}

/**
 * The longest default grace before a job whose due time passed unclaimed is overdue: a minute.
 *
 * @example
 * const late = (await listLeases(pool, { overdueGraceMs: DEFAULT_OVERDUE_GRACE_MS * 5 })).filter((l) => l.overdue)
 */
export const DEFAULT_OVERDUE_GRACE_MS = 60_000

export { checkOverdueFactor, DEFAULT_OVERDUE_FACTOR } from './validate.js'

/**
 * The grace a job is judged with, the one rule for every job: `graceMs` when given, else
 * `overdueFactor − 1` times the job's interval, at most {@link DEFAULT_OVERDUE_GRACE_MS} (which it
 * is while the interval is unknown).
 */
export function overdueGrace(everyMs: number | null, graceMs: number | undefined, overdueFactor: number): number {
  return graceMs ?? (overdueFactor - 1) * Math.min(everyMs ?? DEFAULT_OVERDUE_GRACE_MS, DEFAULT_OVERDUE_GRACE_MS)
}

/** Whether `lease`'s due time is the one its last claim stored, rather than its last claim plus its interval. */
export function judgedByDueTime<L extends Pick<LeaseInfo, 'nextDueAt'>>(lease: L): lease is L & { nextDueAt: string } {
  return lease.nextDueAt !== null
}

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
  const { table, overdueFactor: factor, overdueGraceMs: grace } = compileOptions('listLeases', opts)

  const shape = (await shapeOf({ db, table })) ?? 'original'
  const result = (await runStatement(db, listLeasesSql(table, shape), [], false)) as
    | { rows?: unknown }
    | null
    | undefined
  const rows = result?.rows
  if (!Array.isArray(rows)) {
    throw new TypeError(
      `pg-cron-lease: cannot list the leases in ${table}: the driver's result has no rows array, got ${formatValue(result)}`,
    )
  }
  return rows.map((row) => readLease(row, table, factor, grace))
}

// The statement returns text, boolean and float8 columns; drivers map float8 to a number, or to a
// numeric string (some do), which is accepted. Anything else means a driver (or a table) this code
// does not understand, and a guess could report a held lease as free.
function readLease(row: unknown, table: string, overdueFactor: number, graceMs: number | undefined): LeaseInfo {
  const r = (row ?? {}) as Record<string, unknown>
  const bad = (column: string): never => {
    throw new TypeError(
      `pg-cron-lease: cannot read a lease row of ${table}: column ${column} has an unexpected value, got ${formatValue(row)}`,
    )
  }
  const text = (column: string): string => (typeof r[column] === 'string' ? (r[column] as string) : bad(column))
  const textOrNull = (column: string): string | null => (r[column] === null ? null : text(column))
  const number = (column: string): number => {
    const raw = r[column]
    const value = typeof raw === 'number' ? raw : typeof raw === 'string' && raw !== '' ? Number(raw) : Number.NaN
    return Number.isNaN(value) ? bad(column) : value
  }
  const numberOrNull = (column: string): number | null => (r[column] === null ? null : number(column))
  const flag = (column: string): boolean => (typeof r[column] === 'boolean' ? (r[column] as boolean) : bad(column))

  const remainingMs = number('remaining_ms')
  if (remainingMs < 0 || (!Number.isInteger(remainingMs) && remainingMs !== Number.POSITIVE_INFINITY))
    bad('remaining_ms')
  const lastOutcome = r.last_outcome
  if (lastOutcome !== null && lastOutcome !== 'ok' && lastOutcome !== 'error') bad('last_outcome')
  const everyMs = numberOrNull('every_ms')
  const paused = flag('paused')
  // How late the job is at checkedAt: past its stored due time, or past its last claim plus its interval.
  const sinceDueMs = numberOrNull('since_due_ms')
  const lateMs = sinceDueMs ?? (everyMs === null ? null : number('since_claim_ms') - everyMs)
  return {
    jobName: text('job_name'),
    holder: textOrNull('holder'),
    claimedAt: text('claimed_at'),
    leaseUntil: text('lease_until'),
    held: flag('held'),
    remainingMs,
    checkedAt: text('checked_at'),
    lastOutcome: lastOutcome as LeaseInfo['lastOutcome'],
    lastFinishedAt: textOrNull('last_finished_at'),
    lastDurationMs: numberOrNull('last_duration_ms'),
    lastError: textOrNull('last_error'),
    lastSuccessAt: textOrNull('last_success_at'),
    everyMs,
    // Judged on the database's own difference of two of its timestamps, never this process's clock.
    overdue: !paused && lateMs !== null && lateMs > overdueGrace(everyMs, graceMs, overdueFactor),
    paused,
    pausedUntil: paused ? text('paused_until') : null,
    lastOccurrence: textOrNull('last_occurrence'),
    nextDueAt: textOrNull('next_due_at'),
    missed: number('missed'),
  }
}
