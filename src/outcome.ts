/**
 * Recording how a won tick ended, in the lease row's outcome columns, so `listLeases`, `status` and
 * `check` can tell a failing or overdue job from a healthy one.
 */
import { runStatement } from './query.js'
import { DEFAULT_TABLE, tickStatements } from './sql.js'
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
  /** Send it as a named prepared statement where the driver allows it. */
  prepare: boolean
  /**
   * Whether the table has the outcome columns, as the won claim reported (`Claimed.recordable`).
   * Only `false` skips the write; left out, it is sent and a table without them is recognised by
   * its refusal (42703).
   */
  recordable?: boolean
}

const ERROR_TEXT_LIMIT = 500

/**
 * How long a settled tick waits for its outcome to be written before the caller gets the result.
 * The write is bookkeeping: under synchronous replication with the standby gone, or a database
 * that stopped answering, it can wait forever, and that must not hold the tick's result (or
 * node-cron's next run) hostage. Past this it goes on in the background.
 */
export const RECORD_WAIT_MS = 2000

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
  const { db, table, jobName, claimToken, durationMs, everyMs, logger, prepare } = request
  if (claimToken === null) return
  // Nothing may name a column the table lacks: inside a caller's transaction the refusal would
  // be a failed statement, and the claim told us the shape for free.
  if (request.recordable === false) return warnOriginalShape(table, logger)
  const outcome = settled.outcome === 'unknown' ? null : settled.outcome
  const errorText = settled.outcome === 'error' ? describeError(settled.error) : null
  const send = (text: string | null) =>
    runStatement(
      db,
      tickStatements(table).record,
      [jobName, claimToken, durationMs, outcome, text, everyMs ?? null],
      prepare,
    )
  try {
    await send(errorText)
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code === '42703') return warnOriginalShape(table, logger)
    // A failed run must never be left reading as the last run's 'ok'. Text the database cannot
    // store (a character its encoding lacks, 22P05) is the one cause the run can fix, so the
    // outcome is written again with the message in plain ASCII; any other failure fails again.
    if (outcome === 'error' && errorText !== null && !isAscii(errorText)) {
      try {
        await send(toAscii(errorText))
        return warn(logger, `pg-cron-lease: the error of '${jobName}' was recorded in ASCII: ${firstLine(error)}`)
      } catch {
        // Reported below, with the first error.
      }
    }
    warn(logger, `pg-cron-lease: could not record the outcome of '${jobName}' in ${table}: ${firstLine(error)}`)
  }
}

// Tables already reported as lacking the outcome columns: one warning per table per process.
const warnedTables = new Set<string>()

function warnOriginalShape(table: string, logger: LeaseLogger | undefined): void {
  if (warnedTables.has(table)) return
  warnedTables.add(table)
  warn(
    logger,
    `pg-cron-lease: ${table} has the original shape, so the outcome of each run is not recorded; ` +
      `run \`${migrateCommand(table)}\` (or upgradeTableSql()) to add the columns, and recording starts with the next run`,
  )
}

/** The command that upgrades `table`, as an operator would type it. */
export function migrateCommand(table: string): string {
  return `pg-cron-lease migrate${table === DEFAULT_TABLE ? '' : ` --table ${table}`}`
}

/** `logger.warn`, else `console.warn`: a warning nobody sees would make a silent miss again. */
export function warn(logger: LeaseLogger | undefined, message: string): void {
  if (typeof logger?.warn === 'function') logger.warn(message)
  else console.warn(message)
}

/**
 * `Name: first line of the message`, as one clean line for a column, a log line or a metric:
 * cut at the first line end (CR, LF, NEL, U+2028, U+2029), with every other control character
 * (NUL included, which Postgres refuses in text) shown as a space and every lone surrogate as
 * U+FFFD, at most 500 UTF-16 units, never a stack and never half a surrogate pair.
 */
export function describeError(error: unknown): string {
  let name = 'Error'
  try {
    if (error instanceof Error || (typeof error === 'object' && error !== null && 'name' in error)) {
      name = oneLine(String((error as { name: unknown }).name)) || 'Error'
    } else name = typeof error
  } catch {
    // A throwing getter: the name stays generic.
  }
  return clip(`${name}: ${firstLine(error)}`, ERROR_TEXT_LIMIT)
}

function firstLine(error: unknown): string {
  try {
    const message = error instanceof Error ? error.message : String((error as { message?: unknown })?.message ?? error)
    return oneLine(message)
  } catch {
    return '(the error could not be read)'
  }
}

// Everything up to the first line end, with the other controls made spaces and lone surrogates
// made U+FFFD (what String#toWellFormed does; written out for the TypeScript target).
function oneLine(text: string): string {
  const first = text.split(/[\r\n\u0085\u2028\u2029]/, 1)[0] ?? ''
  return first.replace(LONE_SURROGATE, '\ufffd').replace(/\p{Cc}/gu, ' ')
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g

/** At most `limit` UTF-16 units, ending in `…` when cut, never between the halves of a pair. */
function clip(text: string, limit: number): string {
  if (text.length <= limit) return text
  let end = limit - 1
  const last = text.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end--
  return `${text.slice(0, end)}…`
}

function isAscii(text: string): boolean {
  return /^[\x20-\x7e]*$/.test(text)
}

function toAscii(text: string): string {
  return text.replace(/[^\x20-\x7e]/gu, '?')
}
