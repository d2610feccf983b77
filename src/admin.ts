/** Acting on one job's row without a deploy: pause, resume, or end a crashed holder's lease. */
import { formatValue } from './format-value.js'
import { migrateCommand } from './log.js'
import { compileOptions, type EntryPoint } from './options.js'
import { runStatement } from './query.js'
import { pauseSql, releaseSql, resumeSql, type Shape } from './sql.js'
import { readFacts } from './table-facts.js'
import { parseUntil } from './time-input.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkJobName, checkMs, checkQueryable, fail } from './validate.js'

/**
 * Options for {@link resumeJob} and {@link releaseLease}.
 *
 * @example
 * const opts: JobOptions = { table: 'jobs.leases' }
 */
export interface JobOptions extends Pick<LeaseOptions, 'table'> {}

/**
 * Options for {@link pauseJob}: a length or an end; neither pauses until {@link resumeJob}.
 *
 * @example
 * const opts: PauseOptions = { forMs: 2 * 60 * 60 * 1000 } // two hours, by the database clock
 */
export interface PauseOptions extends JobOptions {
  /** When the pause ends: a `Date` or an ISO-8601 string with a zone (`Z` or `+02:00`). */
  until?: Date | string
  /** How long the pause lasts from now, by the database clock, in ms. */
  forMs?: number
}

/** A job's lease and pause right after a change, by the database clock. */
export interface JobState {
  jobName: string
  leaseUntil: string
  pausedUntil: string | null
  /** When the change was made, database clock. */
  changedAt: string
  /** From a resume: whether a pause was in force when it ran. */
  wasPaused?: boolean
}

/**
 * Pauses a job on every replica: the pause holds its lease until it ends. A running tick is not
 * stopped, but its next renew fails; its own lease is kept. `false` when the job has no row.
 * Needs the current shape (`pg-cron-lease migrate`).
 *
 * @example
 * await pauseJob(pool, 'billing:hourly', { forMs: 30 * 60_000 }) // skip the next half hour
 */
export async function pauseJob(db: Queryable, jobName: string, opts?: PauseOptions): Promise<boolean> {
  return (await pause(db, jobName, opts)) !== null
}

/**
 * Ends a job's pause; a running claim's own lease runs to its end. `false` when the job has no row.
 *
 * @example
 * await resumeJob(pool, 'billing:hourly')
 */
export async function resumeJob(db: Queryable, jobName: string, opts?: JobOptions): Promise<boolean> {
  return (await resume(db, jobName, opts)) !== null
}

/**
 * Ends a job's current lease now, for a crashed holder; a pause stays. `false` when it has no row.
 *
 * @example
 * await releaseLease(pool, 'import:nightly')
 */
export async function releaseLease(db: Queryable, jobName: string, opts?: JobOptions): Promise<boolean> {
  return (await release(db, jobName, opts)) !== null
}

// pause, resume and release resolve the job's state after the change (null: no row), for the CLI.
export async function pause(db: Queryable, jobName: string, opts?: PauseOptions): Promise<JobState | null> {
  const { table, until: end, forMs: length } = opening(db, jobName, 'pauseJob', opts)
  if (end !== undefined && length !== undefined) {
    fail('opts.until', 'left out when opts.forMs is given (a pause has one end)', end)
  }
  const forMs = length === undefined ? null : checkMs(length, 'opts.forMs', Number.MAX_SAFE_INTEGER)
  const until = end === undefined ? null : parseUntil(end, 'opts.until')
  await requireShape(db, table, 'pausing')
  const row = await changeJob(db, pauseSql(table), [jobName, forMs, until], jobName)
  // Judged by the database clock; the statement wrote nothing when the end had passed.
  if (row?.in_future === false) {
    fail(
      'opts.until',
      `a time in the future by the database clock (${String(row.clock_at)}); nothing was changed`,
      until,
    )
  }
  return row === null || row.job_name === null ? null : jobState(row)
}

export async function resume(db: Queryable, jobName: string, opts?: JobOptions): Promise<JobState | null> {
  const { table } = opening(db, jobName, 'resumeJob', opts)
  await requireShape(db, table, 'resuming')
  const row = await changeJob(db, resumeSql(table), [jobName], jobName)
  return row === null || row.job_name === null ? null : { ...jobState(row), wasPaused: row.was_paused === true }
}

export async function release(db: Queryable, jobName: string, opts?: JobOptions): Promise<JobState | null> {
  const { table } = opening(db, jobName, 'releaseLease', opts)
  const shape = await requireShape(db, table, undefined)
  const row = await changeJob(db, releaseSql(table, shape), [jobName], jobName)
  return row === null ? null : jobState(row)
}

function opening(db: Queryable, jobName: string, caller: EntryPoint, opts: JobOptions | undefined) {
  checkQueryable(db)
  checkJobName(jobName)
  return compileOptions(caller, opts)
}

// Refuses before writing: a missing column would fail inside a caller's transaction.
async function requireShape(db: Queryable, table: string, doing: string | undefined): Promise<Shape> {
  const shape = await readFacts({ db, table })
  if (shape === undefined) {
    throw new Error(
      `pg-cron-lease: the lease table ${table} does not exist (or this role cannot see it): create it with ` +
        `\`${migrateCommand(table)}\` (or createTableSql()); nothing was changed`,
    )
  }
  if (shape !== 'current' && doing !== undefined) {
    throw new Error(
      `pg-cron-lease: ${doing} needs columns that ${table} lacks (those of the current shape): run ` +
        `\`${migrateCommand(table)}\` (or upgradeTableSql()) to add them; nothing was changed`,
    )
  }
  return shape
}

function jobState(row: Record<string, unknown>): JobState {
  return {
    jobName: String(row.job_name),
    leaseUntil: String(row.lease_until),
    pausedUntil: typeof row.paused_until === 'string' ? row.paused_until : null,
    changedAt: String(row.checked_at),
  }
}

async function changeJob(db: Queryable, text: string, params: unknown[], jobName: string) {
  const result = await runStatement(db, text, params, false)
  const rows = (result as { rows?: unknown } | null | undefined)?.rows
  if (!Array.isArray(rows) || rows.length > 1) {
    throw new TypeError(
      `pg-cron-lease: cannot tell whether '${jobName}' was changed: the driver's result has no rows array of at most one row, got ${formatValue(result)}`,
    )
  }
  return (rows[0] as Record<string, unknown> | undefined) ?? null
}
