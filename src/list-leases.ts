/** Inspecting the lease table, as the database clock sees it. */
import { formatValue } from './format-value.js'
import { compileOptions } from './options.js'
import { runStatement } from './query.js'
import { listLeasesSql } from './sql.js'
import { knowledgeOf } from './state.js'
import { shapeOf } from './table-facts.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkQueryable } from './validate.js'

/**
 * One job's row in the lease table. Timestamps are ISO-8601 UTC text with microseconds, the claim
 * token's format.
 *
 * @example
 * const lease: LeaseInfo = (await listLeases(pool))[0]
 * if (lease.held) console.log(`${lease.holder} holds ${lease.jobName} for ${lease.remainingMs} ms`)
 */
export interface LeaseInfo {
  jobName: string
  /** The holder name written by the last claim; `null` in a row written without one. */
  holder: string | null
  /** When the last claim was made (its claim token), database clock. */
  claimedAt: string
  /** When the lease ends, database clock; `'infinity'` under an open-ended pause. */
  leaseUntil: string
  /** Whether the lease is still held at `checkedAt`: a claim made then would lose. */
  held: boolean
  /** Whole ms left at `checkedAt`, rounded up; `Infinity` under an open-ended pause. */
  remainingMs: number
  /** The database clock reading all rows of one call were judged at. */
  checkedAt: string
  /**
   * The job's last run: `running` while its claim's lease holds and it has recorded no end; `ok` or
   * `error` once recorded; `unfinished` when its lease ended with no outcome (its replica died or
   * lost the lease); `null` when no run was recorded yet, or its scheduler could not say how it
   * ended. Claims that record no run (`record: false`, the original package) change nothing here.
   */
  lastOutcome: 'running' | 'ok' | 'error' | 'unfinished' | null
  /**
   * How the last run that has ended ended: `lastOutcome`, except while a run is running, when it is
   * the one before. What `check` judges: `error` is failing and `unfinished` died, until a run ends ok.
   */
  lastEndedOutcome: 'ok' | 'error' | 'unfinished' | null
  /** When the last run started (its claim), database clock; `null` if none was recorded. */
  lastStartedAt: string | null
  /** When the last run that ended ended, database clock (for one that died, when its lease ran out); `null` if none. */
  lastFinishedAt: string | null
  /** How long the last run that ended took, in ms (this process's monotonic clock); `null` if none, or it died. */
  lastDurationMs: number | null
  /**
   * For a last ended run that failed: `Name: first line of the message`, at most 500 characters; for
   * one that died, which holder it was and when its lease ran out.
   */
  lastError: string | null
  /** When a run last ended `ok`, database clock; `null` if none has. */
  lastSuccessAt: string | null
  /** The job's interval in ms: declared, else given by its scheduler, else observed; `null` while unknown. */
  everyMs: number | null
  /**
   * Not paused, and past its due time by more than the grace (see {@link ListLeasesOptions}): the
   * due time is `nextDueAt`, else the last claim plus `everyMs`, and after a pause the first
   * occurrence at or after its end.
   */
  overdue: boolean
  /** The scheduled time of the latest occurrence claimed, as the scheduler named it; `null` if none. */
  lastOccurrence: string | null
  /**
   * When the job is next due, database clock; `null` while unknown. After a pause, its first
   * occurrence at or after the pause's end (the end itself with no interval known).
   */
  nextDueAt: string | null
  /** The occurrences that fell due unclaimed, counted so far by the claims (or a pause) after them (0 if none, or unknown). */
  missed: number
  /** How many of the job's runs died, ever (a counter); `null` on a table without its run history's columns. */
  unfinishedRuns: number | null
  /** A pause (`pauseJob`, `pg-cron-lease pause`) holds the job at `checkedAt`: nobody can claim it. */
  paused: boolean
  /** When the pause ends, database clock (`'infinity'` when open-ended); `null` when not paused. */
  pausedUntil: string | null
  /**
   * When the job's last pause ended, by resume or by running out, until the job is claimed again;
   * `null` otherwise. The occurrences the pause covered are neither overdue nor missed.
   */
  resumedAt: string | null
}

/**
 * Options for {@link listLeases}.
 *
 * @example
 * const opts: ListLeasesOptions = { table: 'jobs.leases' }
 */
export interface ListLeasesOptions extends Pick<LeaseOptions, 'table'> {
  /** The grace is `overdueFactor − 1` intervals, each at most a minute. Default: 2. At least 1. */
  overdueFactor?: number
  /** The grace in ms, whatever the factor. */
  overdueGraceMs?: number
}

/**
 * The longest default grace before a job whose due time passed unclaimed is overdue: a minute.
 *
 * @example
 * await listLeases(pool, { overdueGraceMs: DEFAULT_OVERDUE_GRACE_MS * 5 })
 */
export const DEFAULT_OVERDUE_GRACE_MS = 60_000

/** The one grace rule for every job: `graceMs`, else `overdueFactor − 1` capped intervals. */
export function overdueGrace(everyMs: number | null, graceMs: number | undefined, overdueFactor: number): number {
  return graceMs ?? (overdueFactor - 1) * Math.min(everyMs ?? DEFAULT_OVERDUE_GRACE_MS, DEFAULT_OVERDUE_GRACE_MS)
}

/**
 * Every lease in the table, ordered by job name, judged at one instant of the database clock. Only
 * reads; a result it cannot read rejects with a TypeError rather than a partial answer.
 *
 * @example
 * const lease = (await listLeases(pool)).find((l) => l.jobName === 'billing:hourly')
 */
export async function listLeases(db: Queryable, opts?: ListLeasesOptions): Promise<LeaseInfo[]> {
  return (await readLeases(db, opts)).leases
}

/** {@link listLeases}, with the database clock reading they were judged at, which an empty table has too. */
export async function readLeases(
  db: Queryable,
  opts?: ListLeasesOptions,
): Promise<{ leases: LeaseInfo[]; checkedAt: string; table: string }> {
  checkQueryable(db)
  const { table, overdueFactor: factor, overdueGraceMs: grace } = compileOptions('listLeases', opts)
  const shape = (await shapeOf({ db, table })) ?? 'original'
  const { history } = knowledgeOf(db, table)
  const result = await runStatement(db, listLeasesSql(table, shape, history), [], false)
  const rows = (result as { rows?: unknown } | null | undefined)?.rows
  if (!Array.isArray(rows)) {
    throw new TypeError(
      `pg-cron-lease: cannot list the leases in ${table}: the driver's result has no rows array, got ${formatValue(result)}`,
    )
  }
  // An empty table's one row carries the clock reading and no job.
  const checkedAt = (rows[0] as { checked_at?: unknown } | undefined)?.checked_at
  if (typeof checkedAt !== 'string') {
    throw new TypeError(
      `pg-cron-lease: cannot read a lease row of ${table}: column checked_at has an unexpected value, got ${formatValue(rows[0])}`,
    )
  }
  const jobs = rows.filter((row) => (row as { job_name?: unknown } | null)?.job_name !== null)
  return { leases: jobs.map((row) => readLease(row, table, factor, grace)), checkedAt, table }
}

// A guess at a value this code does not understand could report a held lease as free.
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
  const oneOf = <T extends string>(column: string, values: readonly T[]): T | null =>
    r[column] === null ? null : values.includes(r[column] as T) ? (r[column] as T) : bad(column)
  const everyMs = numberOrNull('every_ms')
  const paused = flag('paused')
  const lateMs = numberOrNull('since_due_ms')
  return {
    jobName: text('job_name'),
    holder: textOrNull('holder'),
    claimedAt: text('claimed_at'),
    leaseUntil: text('lease_until'),
    held: flag('held'),
    remainingMs,
    checkedAt: text('checked_at'),
    lastOutcome: oneOf('last_outcome', ['running', 'ok', 'error', 'unfinished'] as const),
    lastEndedOutcome: oneOf('last_ended_outcome', ['ok', 'error', 'unfinished'] as const),
    lastStartedAt: textOrNull('last_started_at'),
    lastFinishedAt: textOrNull('last_finished_at'),
    lastDurationMs: numberOrNull('last_duration_ms'),
    lastError: textOrNull('last_error'),
    lastSuccessAt: textOrNull('last_success_at'),
    everyMs,
    // The database's own difference of two of its timestamps, never this process's clock.
    overdue: !paused && lateMs !== null && lateMs > overdueGrace(everyMs, graceMs, overdueFactor),
    paused,
    pausedUntil: paused ? text('paused_until') : null,
    resumedAt: paused ? null : textOrNull('resumed_at'),
    lastOccurrence: textOrNull('last_occurrence'),
    nextDueAt: textOrNull('next_due_at'),
    missed: number('missed'),
    unfinishedRuns: numberOrNull('unfinished_runs'),
  }
}
