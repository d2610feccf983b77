/**
 * Recording how a won tick ended, in the lease row's 2.1 columns, so `listLeases`, `status` and
 * `check` can tell a failing or overdue job from a healthy one.
 */
import { recordOutcomeSql } from './sql.js'
import type { LeaseLogger, Queryable } from './types.js'

/** What one settled run reports: `ok`, an error, or `unknown` when the scheduler cannot say. */
export type Settled = { outcome: 'ok' } | { outcome: 'error'; error: unknown } | { outcome: 'unknown' }

/** The run whose outcome is recorded, identified by its claim. */
export interface RecordRequest {
  db: Queryable
  table: string
  jobName: string
  claimToken: string | null
  durationMs: number
  /** The declared interval, or undefined to let the table observe it. */
  everyMs: number | undefined
  logger: LeaseLogger | undefined
}

const ERROR_TEXT_LIMIT = 500

/**
 * How long a settled tick waits for its outcome to be written before the caller gets the result.
 * The write is bookkeeping: under synchronous replication with the standby gone, or a database
 * that stopped answering, it can wait forever, and that must not hold the tick's result (or
 * node-cron's next run) hostage. Past this it goes on in the background.
 */
export const RECORD_WAIT_MS = 2000

// Tables already reported as lacking the 2.1 columns: one warning per table per process.
const warnedTables = new Set<string>()

/**
 * Writes the outcome with one statement fenced on the claim token, waiting for it at most
 * {@link RECORD_WAIT_MS}. Never rejects and never changes the lease: a failure to record is a
 * warning, because the run itself already happened. A claim without a token (a driver that
 * reports only `rowCount`) cannot be fenced, so it is not recorded.
 */
export async function recordOutcome(request: RecordRequest, settled: Settled): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const waited = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, RECORD_WAIT_MS)
    timer.unref()
  })
  await Promise.race([write(request, settled), waited])
  clearTimeout(timer)
}

async function write(request: RecordRequest, settled: Settled): Promise<void> {
  const { db, table, jobName, claimToken, durationMs, everyMs, logger } = request
  if (claimToken === null) return
  const outcome = settled.outcome === 'unknown' ? null : settled.outcome
  const errorText = settled.outcome === 'error' ? describeError(settled.error) : null
  try {
    // Plain text, not prepared: it runs once per won tick, and on a table of the original shape
    // it fails to parse every time until the table is upgraded.
    await db.query(recordOutcomeSql(table), [jobName, claimToken, durationMs, outcome, errorText, everyMs ?? null])
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code === '42703') {
      if (warnedTables.has(table)) return
      warnedTables.add(table)
      warn(
        logger,
        `pg-cron-lease: ${table} has the original shape, so the outcome of each run is not recorded; ` +
          `run \`pg-cron-lease migrate${table === 'cron_leases' ? '' : ` --table ${table}`}\` (or upgradeTableSql()) ` +
          'to add the columns, and recording starts with the next run',
      )
      return
    }
    warn(logger, `pg-cron-lease: could not record the outcome of '${jobName}' in ${table}: ${firstLine(error)}`)
  }
}

/** `logger.warn`, else `console.warn`: a warning nobody sees would make a silent miss again. */
export function warn(logger: LeaseLogger | undefined, message: string): void {
  if (typeof logger?.warn === 'function') logger.warn(message)
  else console.warn(message)
}

/** `Name: first line of the message`, at most 500 characters, never a stack. */
export function describeError(error: unknown): string {
  let name = 'Error'
  try {
    if (error instanceof Error || (typeof error === 'object' && error !== null && 'name' in error)) {
      name = String((error as { name: unknown }).name) || 'Error'
    } else name = typeof error
  } catch {
    // A throwing getter: the name stays generic.
  }
  const text = `${name}: ${firstLine(error)}`
  return text.length > ERROR_TEXT_LIMIT ? `${text.slice(0, ERROR_TEXT_LIMIT - 1)}…` : text
}

function firstLine(error: unknown): string {
  try {
    const message = error instanceof Error ? error.message : String((error as { message?: unknown })?.message ?? error)
    return message.split(/\r?\n/, 1)[0] ?? ''
  } catch {
    return '(the error could not be read)'
  }
}
