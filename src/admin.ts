/** Acting on one job's row without a deploy: pause, resume, or end a crashed holder's lease. */
import { codedError, ERROR_CODES } from './errors.js'
import { escapeControls, formatValue } from './format-value.js'
import { migrateCommand } from './log.js'
import { compileOptions, type EntryPoint } from './options.js'
import { runStatement } from './query.js'
import { pauseSql, releaseSql, resumeSql, rowLockHoldersSql } from './sql.js'
import { readFacts } from './table-facts.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkJobName, checkMs, checkQueryable, fail, parseUntil } from './validate.js'

/** Options for {@link pauseJob}, {@link resumeJob} and {@link releaseLease}. */
export interface JobOptions extends Pick<LeaseOptions, 'table'> {
  /** The longest wait for the job's row lock, in ms; the error then names what holds it. Default: 5000. */
  lockTimeoutMs?: number
}

/** Options for {@link pauseJob}: a length or an end; neither pauses until {@link resumeJob}. */
export interface PauseOptions extends JobOptions {
  /** When the pause ends: a `Date` or an ISO-8601 string with a zone (`Z` or `+02:00`). */
  until?: Date | string
  /** How long the pause lasts from now, by the database clock, in ms. */
  forMs?: number
}

// A job's lease and pause right after a change, by the database clock.
export type JobState = NonNullable<ReturnType<typeof jobState>>

/**
 * Pauses a job on every replica; a running tick's next renew fails. Occurrences due while paused are skipped, not
 * missed (those already missed are counted now). `false` when the job has no row. Needs `pg-cron-lease migrate`.
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
  const { table, until: end, forMs: length, lockTimeoutMs } = opening(db, jobName, 'pauseJob', opts)
  if (end !== undefined && length !== undefined)
    fail('opts.until', 'left out when opts.forMs is given (a pause has one end)', end)
  const forMs = length === undefined ? null : checkMs(length, 'opts.forMs', Number.MAX_SAFE_INTEGER)
  const until = end === undefined ? null : parseUntil(end, 'opts.until')
  const row = await changeJob(db, { table, jobName, doing: 'pause', lockTimeoutMs }, pauseSql, [forMs, until])
  if (row?.in_future === false)
    fail('opts.until', `a time in the future by the database clock (${row.clock_at}); nothing was changed`, until)
  return jobState(row)
}

export async function resume(db: Queryable, jobName: string, opts?: JobOptions): Promise<JobState | null> {
  const { table, lockTimeoutMs } = opening(db, jobName, 'resumeJob', opts)
  return jobState(await changeJob(db, { table, jobName, doing: 'resume', lockTimeoutMs }, resumeSql))
}

export async function release(db: Queryable, jobName: string, opts?: JobOptions): Promise<JobState | null> {
  const { table, lockTimeoutMs } = opening(db, jobName, 'releaseLease', opts)
  return jobState(await changeJob(db, { table, jobName, doing: 'release', lockTimeoutMs }, releaseSql))
}

function opening(db: Queryable, jobName: string, caller: EntryPoint, opts: JobOptions | undefined) {
  checkQueryable(db)
  checkJobName(jobName)
  return compileOptions(caller, opts)
}

function jobState(row: Record<string, unknown> | null) {
  if (row === null || row.job_name === null) return null
  return {
    jobName: String(row.job_name),
    leaseUntil: String(row.lease_until),
    pausedUntil: typeof row.paused_until === 'string' ? row.paused_until : null,
    changedAt: String(row.checked_at),
    ...(typeof row.was_paused === 'boolean' && { wasPaused: row.was_paused }),
  }
}

type Change = { table: string; jobName: string; doing: 'pause' | 'resume' | 'release'; lockTimeoutMs: number }

async function changeJob(db: Queryable, change: Change, statement: typeof releaseSql, params: unknown[] = []) {
  const { table, jobName, doing, lockTimeoutMs } = change
  // Refused before writing: a missing column would fail inside a caller's transaction. Release needs no new column.
  const shape = await readFacts({ db, table })
  if (shape === undefined)
    throw new Error(
      `pg-cron-lease: the lease table ${table} does not exist (or this role cannot see it): create it with ` +
        `\`${migrateCommand(table)}\` (or createTableSql()); nothing was changed`,
    )
  if (shape !== 'current' && doing !== 'release')
    throw new Error(
      `pg-cron-lease: ${doing === 'pause' ? 'pausing' : 'resuming'} needs columns that ${table} lacks (those of the ` +
        `current shape): run \`${migrateCommand(table)}\` (or upgradeTableSql()) to add them; nothing was changed`,
    )
  const sent = runStatement(db, statement(table, shape), [jobName, ...params, lockTimeoutMs], false)
  const result = await sent.catch(async (error: unknown) => {
    throw (error as { code?: unknown } | null)?.code === '55P03' ? await rowLocked(db, change, error) : error
  })
  const rows = (result as { rows?: unknown } | null | undefined)?.rows
  if (!Array.isArray(rows) || rows.length > 1)
    throw new TypeError(
      `pg-cron-lease: cannot tell whether '${jobName}' was changed: the driver's result has no rows array of at most one row, got ${formatValue(result)}`,
    )
  return (rows[0] as Record<string, unknown> | undefined) ?? null
}

// Read after the wait ran out, as nothing can be asked of a statement while it waits.
async function rowLocked(db: Queryable, { table, jobName, doing, lockTimeoutMs }: Change, cause: unknown) {
  type Holder = { pid?: unknown; application_name?: unknown }
  const found = await runStatement(db, rowLockHoldersSql(table), [jobName], false).then(
    (result) => ((result as { rows?: Holder[] }).rows ?? []).filter((h) => typeof h.pid === 'number'),
    () => [],
  )
  const named = (h: Holder) =>
    typeof h.application_name === 'string' ? ` (application_name ${formatValue(h.application_name)})` : ''
  const by =
    found.length > 0
      ? `${found.map((h) => `pid ${h.pid}${named(h)}`).join(', ')}, a transaction still open`
      : 'another transaction (its pid cannot be read: it may have ended since, hold it with others, or be hidden from this role)'
  const message =
    `pg-cron-lease: cannot ${doing} '${escapeControls(jobName)}': its row in ${table} stayed locked for ${lockTimeoutMs} ms (opts.lockTimeoutMs) by ${by}; ` +
    `nothing was changed. End that transaction (for a crashed holder, pg_terminate_backend(${found[0]?.pid ?? 'pid'})), ` +
    'or wait longer with a larger opts.lockTimeoutMs'
  return codedError(ERROR_CODES.ROW_LOCKED, message, cause)
}
