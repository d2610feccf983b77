/** Reading the run history: one row per run, newest first, as the database recorded it. */
import { codedError, ERROR_CODES } from './errors.js'
import { knowledgeOf } from './handle.js'
import { cellsOf, rowsOf } from './list-leases.js'
import { migrateCommand } from './log.js'
import { compileOptions } from './options.js'
import { runStatement } from './query.js'
import { historyTableOf, listRunsSql } from './sql.js'
import { readFacts } from './table-facts.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkQueryable } from './validate.js'

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
