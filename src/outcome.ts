/** Recording how a won tick ended: in the lease row, for `listLeases`, `status` and `check`, and in the run history. */
import { migrateCommand, warn } from './log.js'
import { DEFAULT_HISTORY } from './options.js'
import { runStatement } from './query.js'
import { historyTableOf, lateRunSql } from './sql.js'
import { firstWarning, knowledgeOf, statementsOf } from './state.js'
import type { Ticket } from './ticket.js'
import type { Queryable } from './types.js'

/** What one settled run reports: `ok`, an error, or `unknown` when the scheduler cannot say. */
export type Settled = { outcome: 'ok' } | { outcome: 'error'; error: unknown } | { outcome: 'unknown' }

const ERROR_TEXT_LIMIT = 500

/** How long a settled tick waits for its outcome's write, which can hang (a gone sync standby); then it runs on. */
export const RECORD_WAIT_MS = 2000

/**
 * Writes the outcome fenced on the claim, once the renews and beats already sent (`after`) have
 * settled, waiting at most {@link RECORD_WAIT_MS} in all; never rejects: the run happened.
 */
export async function recordOutcome(
  ticket: Ticket,
  durationMs: number,
  everyMs: number | undefined,
  settled: Settled,
  after?: Promise<unknown>,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const waited = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, RECORD_WAIT_MS).unref()
  })
  const written =
    after === undefined
      ? write(ticket, durationMs, everyMs, settled)
      : after.then(() => write(ticket, durationMs, everyMs, settled))
  await Promise.race([written, waited])
  clearTimeout(timer)
}

// `everyMs`: the declared interval, or undefined to let the table observe it.
async function write(ticket: Ticket, durationMs: number, everyMs: number | undefined, settled: Settled) {
  const { db, table, jobName, holder, logger, prepare } = ticket.config
  const { claimToken } = ticket
  // The original shape has no outcome columns; the table's shape warning already said so.
  if (claimToken === null || ticket.shape !== 'current') return
  const outcome = settled.outcome === 'unknown' ? null : settled.outcome
  const errorText = settled.outcome === 'error' ? describeError(settled.error) : null
  const { history } = knowledgeOf(db, table)
  const keep = ticket.config.history ?? DEFAULT_HISTORY
  if (!history && keep !== false && firstWarning(table, 'history')) warnNoHistory(ticket)
  const statements = statementsOf(table, 'current')
  const send = async (text: string | null) => {
    const params = [jobName, claimToken, durationMs, outcome, text, everyMs ?? null]
    if (!history || keep === false) return runStatement(db, statements.record, params, prepare)
    // Almost every run ends ok, with no claim dead before it, on a row already numbered: its record
    // has the least to do (recordRunSql).
    const { occurrence, missed, catchUp, unrecorded, runNumbers } = ticket
    const full = outcome !== 'ok' || unrecorded || runNumbers === null
    const run = [holder, occurrence?.toISOString() ?? null, missed, catchUp, keep.keep, keep.keepFailed]
    const statement = full ? statements.recordRunFull : statements.recordRun
    const result = await runStatement(
      db,
      statement,
      [...params, ...run, ...(runNumbers ?? [null, null, null])],
      prepare,
    )
    // No row written: another claim replaced this one before the run ended.
    if (!wrote(result)) await recordLate(db, table, params.slice(0, 5))
    return result
  }
  try {
    await send(errorText)
  } catch (error) {
    // A failed run must never read as the last run's 'ok'. Text the database cannot store (22P05, a
    // character its encoding lacks; 22021, one it cannot take at all) is the one cause a retry in
    // ASCII fixes; any other failure would fail again, and the row keeps its last recorded outcome.
    const code = (error as { code?: unknown } | null)?.code
    if (errorText !== null && (code === '22P05' || code === '22021') && NON_ASCII.test(errorText)) {
      try {
        await send(errorText.replace(/[^\x20-\x7e]/gu, '?'))
        return warn(logger, `pg-cron-lease: the error of '${jobName}' was recorded in ASCII: ${firstLine(error)}`)
      } catch {
        // Reported below, with the first error.
      }
    }
    warn(logger, `pg-cron-lease: could not record the outcome of '${jobName}' in ${table}: ${firstLine(error)}`)
  }
}

// A run outlived by the claim that replaced its own: its outcome goes where that claim keeps it, in
// the lease row while that claim's run is not recorded, else in its history row (lateRunSql). One
// after the other, so the second sees what a record between them wrote. Plain text: rarely sent.
async function recordLate(db: Queryable, table: string, params: unknown[]): Promise<void> {
  if (wrote(await runStatement(db, lateRunSql(table, 'unrecorded'), params, false))) return
  await runStatement(db, lateRunSql(table, 'history'), params, false)
}

// Whether a statement changed a row: its rowCount where the driver gives one, else its rows.
function wrote(result: unknown): boolean {
  const { rowCount, rows } = (result ?? {}) as { rowCount?: unknown; rows?: unknown }
  return typeof rowCount === 'number' ? rowCount > 0 : Array.isArray(rows) && rows.length > 0
}

function warnNoHistory({ config }: Ticket): void {
  warn(
    config.logger,
    `pg-cron-lease: ${config.table} has no run history table (${historyTableOf(config.table)}), so runs are not kept; ` +
      `claims, outcomes and pauses work as before; run \`${migrateCommand(config.table)}\` (or upgradeTableSql()) to add it: ` +
      'replicas see it within a minute, with no restart',
  )
}

/** `Name: first line` as one clean line: controls as spaces, lone surrogates as U+FFFD, at most 500 units. */
export function describeError(error: unknown): string {
  let name = 'Error'
  try {
    if (error instanceof Error || (typeof error === 'object' && error !== null && 'name' in error)) {
      name = oneLine(String((error as { name: unknown }).name)) || 'Error'
    } else name = typeof error
  } catch {
    // A throwing getter: the name stays generic.
  }
  const text = `${name}: ${firstLine(error)}`
  if (text.length <= ERROR_TEXT_LIMIT) return text
  // Cut with `…`, never between the halves of a pair.
  const end = ERROR_TEXT_LIMIT - 1
  const last = text.charCodeAt(end - 1)
  return `${text.slice(0, last >= 0xd800 && last <= 0xdbff ? end - 1 : end)}…`
}

function firstLine(error: unknown): string {
  try {
    return oneLine(error instanceof Error ? error.message : String((error as { message?: unknown })?.message ?? error))
  } catch {
    return '(the error could not be read)'
  }
}

// Lone surrogates made U+FFFD, as String#toWellFormed does (written out for the TypeScript target);
// controls made spaces, as Postgres refuses NUL.
function oneLine(text: string): string {
  const first = text.split(/[\r\n\u0085\u2028\u2029]/, 1)[0] ?? ''
  return first.replace(LONE_SURROGATE, '\ufffd').replace(/\p{Cc}/gu, ' ')
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g

const NON_ASCII = /[^\x20-\x7e]/u
