/** Reading the lease table and its run history, as the database clock sees them. */
import { codedError, ERROR_CODES } from './errors.js'
import { formatValue } from './format-value.js'
import { knowledgeOf } from './handle.js'
import { migrateCommand } from './log.js'
import { compileOptions } from './options.js'
import { runStatement } from './query.js'
import { historyTableOf, listLeasesSql, listRunsSql } from './sql.js'
import { readFacts, shapeOf } from './table-facts.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkQueryable } from './validate.js'

/** One job's row in the lease table. Timestamps are ISO-8601 UTC text with microseconds, as the claim token. */
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
  /** The last run: `running`, then `ok`, `error` or `unfinished` (its lease ended with no outcome); `null`: unknown. */
  lastOutcome: 'running' | 'ok' | 'error' | 'unfinished' | null
  /** How the last run that has ended ended (`lastOutcome`, or the one before while a run runs): what `check` judges. */
  lastEndedOutcome: 'ok' | 'error' | 'unfinished' | null
  /** When the last run started (its claim), database clock; `null` if none was recorded. */
  lastStartedAt: string | null
  /** When the last run that ended ended, database clock (for one that died, when its lease ran out); `null` if none. */
  lastFinishedAt: string | null
  /** How long the last run that ended took, in ms (this process's monotonic clock); `null` if none, or it died. */
  lastDurationMs: number | null
  /** The last ended run's `Name: first line of the message` (at most 500 characters), or for one that died, whose and when. */
  lastError: string | null
  /** When a run last ended `ok`, database clock; `null` if none has. */
  lastSuccessAt: string | null
  /** The job's interval in ms: declared, else given by its scheduler, else observed; `null` while unknown. */
  everyMs: number | null
  /** Not paused, and past its due time (`nextDueAt`, else the last claim plus `everyMs`) by more than the grace. */
  overdue: boolean
  /** The scheduled time of the latest occurrence claimed, as the scheduler named it; `null` if none. */
  lastOccurrence: string | null
  /** When the job is next due (after a pause, its first occurrence at or after the end); `null` while unknown. */
  nextDueAt: string | null
  /** The occurrences that fell due unclaimed, counted so far by the claims (or a pause) after them (0 if none, or unknown). */
  missed: number
  /** How many of the job's runs died, ever (a counter); `null` on a table without its run history's columns. */
  unfinishedRuns: number | null
  /** A pause (`pauseJob`, `pg-cron-lease pause`) holds the job at `checkedAt`: nobody can claim it. */
  paused: boolean
  /** When the pause ends, database clock (`'infinity'` when open-ended); `null` when not paused. */
  pausedUntil: string | null
  /** When the last pause ended (resumed or run out), until the next claim; the occurrences it covered are not missed. */
  resumedAt: string | null
}

/** Options for {@link listLeases}. */
export interface ListLeasesOptions extends Pick<LeaseOptions, 'table'> {
  /** The grace is `overdueFactor − 1` intervals, each at most a minute. Default: 2. At least 1. */
  overdueFactor?: number
  /** The grace in ms, whatever the factor. */
  overdueGraceMs?: number
}

/** The longest default grace before a job whose due time passed unclaimed is overdue: a minute. */
export const DEFAULT_OVERDUE_GRACE_MS = 60_000

export function overdueGrace(everyMs: number | null, graceMs: number | undefined, overdueFactor: number): number {
  return graceMs ?? (overdueFactor - 1) * Math.min(everyMs ?? DEFAULT_OVERDUE_GRACE_MS, DEFAULT_OVERDUE_GRACE_MS)
}

/**
 * Every lease in the table by job name, judged at one instant of the database clock. Only reads; a
 * result it cannot read rejects with a TypeError rather than a partial answer.
 *
 * @example
 * const lease = (await listLeases(pool)).find((l) => l.jobName === 'billing:hourly')
 */
export async function listLeases(db: Queryable, opts?: ListLeasesOptions): Promise<LeaseInfo[]> {
  return (await readLeases(db, opts)).leases
}

// With the clock reading they were judged at, which an empty table has too.
export async function readLeases(db: Queryable, opts?: ListLeasesOptions) {
  checkQueryable(db)
  const { table, overdueFactor: factor, overdueGraceMs: grace } = compileOptions('listLeases', opts)
  const shape = (await shapeOf({ db, table })) ?? 'original'
  const { history } = knowledgeOf(db, table)
  const rows = rowsOf(await runStatement(db, listLeasesSql(table, shape, history), [], false), `the leases in ${table}`)
  const checkedAt = cellsOf(rows[0], `a lease row of ${table}`).text('checked_at')
  const jobs = rows.filter((row) => (row as { job_name?: unknown } | null)?.job_name !== null)
  return { leases: jobs.map((row) => readLease(row, table, factor, grace)), checkedAt, table }
}

function rowsOf(result: unknown, what: string): unknown[] {
  const rows = (result as { rows?: unknown } | null | undefined)?.rows
  if (Array.isArray(rows)) return rows
  throw new TypeError(
    `pg-cron-lease: cannot list ${what}: the driver's result has no rows array, got ${formatValue(result)}`,
  )
}

// A guess at a value this code does not understand could report a held lease as free.
function cellsOf(row: unknown, what: string) {
  const r = (row ?? {}) as Record<string, unknown>
  const bad = (column: string): never => {
    throw new TypeError(
      `pg-cron-lease: cannot read ${what}: column ${column} has an unexpected value, got ${formatValue(row)}`,
    )
  }
  const text = (column: string): string => (typeof r[column] === 'string' ? (r[column] as string) : bad(column))
  const number = (column: string): number => {
    const raw = r[column]
    const value = typeof raw === 'number' ? raw : typeof raw === 'string' && raw !== '' ? Number(raw) : Number.NaN
    return Number.isNaN(value) ? bad(column) : value
  }
  const textOrNull = (column: string) => (r[column] === null ? null : text(column))
  const numberOrNull = (column: string) => (r[column] === null ? null : number(column))
  const flag = (column: string): boolean => (typeof r[column] === 'boolean' ? (r[column] as boolean) : bad(column))
  const oneOf = <T extends string>(column: string, values: readonly T[]): T | null =>
    r[column] === null ? null : values.includes(r[column] as T) ? (r[column] as T) : bad(column)
  return { bad, text, textOrNull, number, numberOrNull, flag, oneOf }
}

export const LAST_OUTCOMES = ['running', 'ok', 'error', 'unfinished'] as const

function readLease(row: unknown, table: string, overdueFactor: number, graceMs: number | undefined): LeaseInfo {
  const { bad, text, textOrNull, number, numberOrNull, flag, oneOf } = cellsOf(row, `a lease row of ${table}`)
  const remainingMs = number('remaining_ms')
  if (remainingMs < 0 || (!Number.isInteger(remainingMs) && remainingMs !== Number.POSITIVE_INFINITY))
    bad('remaining_ms')
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
    lastOutcome: oneOf('last_outcome', LAST_OUTCOMES),
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

/** One run of a job, from the run history. Timestamps are ISO-8601 UTC text with microseconds, database clock. */
export interface RunInfo {
  jobName: string
  /** The occurrence the run was for; `null` for a claim by the lease alone. */
  occurrence: string | null
  /** The holder name of the claim that ran it. */
  holder: string | null
  /** The run's claim token (`ctx.claimToken`). */
  claimedAt: string
  /** When the tick started: its claim, as a tick starts on the claim. */
  startedAt: string
  /** When the run's outcome was recorded; `null` while it runs, and for an unfinished run. */
  finishedAt: string | null
  /** How long the tick took, in ms (this process's monotonic clock); `null` while it runs, and for an unfinished run. */
  durationMs: number | null
  /**
   * `running` while its lease holds, then `ok`, `error`, or `unfinished` (its lease ended first; a late end is still
   * written). `unknown`: a node-cron task the coordinator does not `watch`. An unrecorded run has no row.
   */
  outcome: 'running' | 'ok' | 'error' | 'unfinished' | 'unknown'
  /** For an error: `Name: first line of the message`, at most 500 characters. */
  error: string | null
  /** The occurrences that fell due unclaimed just before this run (its `ctx.missed`). */
  missed: number
  /** Whether the run was a catch-up (`catchUp`). */
  catchUp: boolean
}

/** Options for {@link listRuns}. */
export interface ListRunsOptions extends Pick<LeaseOptions, 'table'> {
  /** Only this job's runs. Default: every job's. */
  jobName?: string
  /** At most this many runs, 1 to 10,000. Default: 100. */
  limit?: number
  /** Only runs that started before this instant (a `Date` or ISO text with a zone): the next page. */
  before?: Date | string
}

/**
 * The runs in the history, newest first, with the runs that died mid-tick among them. Only reads;
 * a table without its history rejects, naming the command that adds it.
 *
 * @example
 * for (const run of await listRuns(pool, { jobName: 'billing:hourly' })) console.log(run.startedAt, run.outcome)
 */
export async function listRuns(db: Queryable, opts?: ListRunsOptions): Promise<RunInfo[]> {
  checkQueryable(db)
  const { table, jobName, limit, before } = compileOptions('listRuns', opts)
  const known = knowledgeOf(db, table)
  const shape = await readFacts({ db, table }, known)
  if (shape === undefined || !known.history)
    throw codedError(
      ERROR_CODES.NO_HISTORY,
      `pg-cron-lease: ${table} has no run history (${historyTableOf(table)}${shape === undefined ? `, nor ${table} itself` : ''}): ` +
        `create it with \`${migrateCommand(table)}\`, or run upgradeTableSql() in a migration`,
    )
  const result = await runStatement(db, listRunsSql(table), [jobName ?? null, before ?? null, limit], false)
  return rowsOf(result, `the runs in ${historyTableOf(table)}`).map((row): RunInfo => {
    const { text, textOrNull, number, numberOrNull, flag } = cellsOf(row, 'a run')
    const claimedAt = text('claimed_at')
    return {
      jobName: text('job_name'),
      occurrence: textOrNull('occurrence'),
      holder: textOrNull('holder'),
      claimedAt,
      startedAt: claimedAt,
      finishedAt: textOrNull('finished_at'),
      durationMs: numberOrNull('duration_ms'),
      outcome: text('outcome') as RunInfo['outcome'],
      error: textOrNull('error'),
      missed: number('missed'),
      catchUp: flag('catch_up'),
    }
  })
}
