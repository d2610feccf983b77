/** Reading the run history: one row per run, newest first, as the database recorded it. */
import { formatValue } from './format-value.js'
import { migrateCommand } from './log.js'
import { compileOptions } from './options.js'
import { runStatement } from './query.js'
import { historyTableOf, listRunsSql } from './sql.js'
import { knowledgeOf } from './state.js'
import { readFacts } from './table-facts.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkQueryable } from './validate.js'

/**
 * One run of a job, from the run history. Timestamps are ISO-8601 UTC text with microseconds, by
 * the database clock.
 *
 * @example
 * const [last] = await listRuns(pool, { jobName: 'billing:hourly', limit: 1 })
 * if (last?.outcome !== 'ok') console.log(`${last?.holder}: ${last?.error ?? 'never finished'}`)
 */
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
  /** When the run's outcome was recorded; `null` for an unfinished run. */
  finishedAt: string | null
  /** How long the tick took, in ms (this process's monotonic clock); `null` for an unfinished run. */
  durationMs: number | null
  /**
   * `ok`, `error`, or `unfinished`: no outcome was ever recorded (its replica died or was killed
   * mid-tick, or it ran with `record: false`), shown once its lease ended. `unknown` only for a
   * node-cron task the coordinator does not `watch`, which cannot say whether it threw.
   */
  outcome: 'ok' | 'error' | 'unfinished' | 'unknown'
  /** For an error: `Name: first line of the message`, at most 500 characters. */
  error: string | null
  /** The occurrences that fell due unclaimed just before this run (its `ctx.missed`). */
  missed: number
  /** Whether the run was a catch-up (`catchUp`). */
  catchUp: boolean
}

/**
 * Options for {@link listRuns}.
 *
 * @example
 * const opts: ListRunsOptions = { jobName: 'billing:hourly', limit: 20 }
 */
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
  if (shape === undefined || !known.history) {
    const message =
      `pg-cron-lease: ${table} has no run history (${historyTableOf(table)}${shape === undefined ? `, nor ${table} itself` : ''}): ` +
      `create it with \`${migrateCommand(table)}\`, or run upgradeTableSql() in a migration`
    throw Object.assign(new Error(message), { code: 'PG_CRON_LEASE_NO_HISTORY' })
  }
  const result = await runStatement(db, listRunsSql(table), [jobName ?? null, before ?? null, limit], false)
  const rows = (result as { rows?: unknown } | null | undefined)?.rows
  if (!Array.isArray(rows)) {
    throw new TypeError(
      `pg-cron-lease: cannot list the runs in ${historyTableOf(table)}: the driver's result has no rows array, got ${formatValue(result)}`,
    )
  }
  return rows.map(readRun)
}

function readRun(row: unknown): RunInfo {
  const r = (row ?? {}) as Record<string, unknown>
  const text = (column: string): string | null => {
    const value = r[column]
    if (value === null || typeof value === 'string') return value
    throw new TypeError(
      `pg-cron-lease: cannot read a run: column ${column} has an unexpected value, got ${formatValue(row)}`,
    )
  }
  const claimedAt = text('claimed_at') as string
  return {
    jobName: text('job_name') as string,
    occurrence: text('occurrence'),
    holder: text('holder'),
    claimedAt,
    startedAt: claimedAt,
    finishedAt: text('finished_at'),
    durationMs: r.duration_ms === null ? null : Number(r.duration_ms),
    outcome: text('outcome') as RunInfo['outcome'],
    error: text('error'),
    missed: Number(r.missed),
    catchUp: r.catch_up === true,
  }
}
