/** Recording how a won tick ended: in the lease row, for `listLeases`, `status` and `check`, and in the run history. */
import { knowledgeOf } from './handle.js'
import { firstWarning, migrateCommand, warn } from './log.js'
import { codeOf, runStatement, statementsOf } from './query.js'
import { historyTableOf } from './sql.js'
import { historyParams, type Ticket } from './ticket.js'

/** What one settled run reports: `ok`, an error, or `unknown` when the scheduler cannot say. */
export type Settled = { outcome: 'ok' } | { outcome: 'error'; error: unknown } | { outcome: 'unknown' }

const ERROR_TEXT_LIMIT = 500

// The outcome's write can hang (a gone sync standby): a settled tick waits this long for it, then runs on.
export const RECORD_WAIT_MS = 2000

// Fenced on the claim, after the renews and beats already sent (`after`); never rejects: the run happened.
export async function recordOutcome(
  ticket: Ticket,
  durationMs: number,
  settled: Settled,
  after?: Promise<unknown>,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, RECORD_WAIT_MS).unref()))
  await Promise.race([Promise.resolve(after).then(() => write(ticket, durationMs, settled)), waited])
  clearTimeout(timer)
}

async function write(ticket: Ticket, durationMs: number, settled: Settled): Promise<void> {
  const { db, table, jobName, logger, prepare, history } = ticket.config
  const { claimToken, kind, runNumber } = ticket
  // Only a claim that marked its run started has one to end; the original shape keeps no outcome.
  if (claimToken === null || (kind !== 'run' && kind !== 'history')) return
  if (kind === 'run' && history !== false && !knowledgeOf(db, table).history && firstWarning(table, 'history'))
    warn(
      logger,
      `pg-cron-lease: ${table} has no run history (${historyTableOf(table)}, with its columns in ${table}) ` +
        'that this role may write, so runs are not kept; claims, outcomes and pauses work as before; run ' +
        `\`${migrateCommand(table)}\` (or upgradeTableSql()) to add it, and grant SELECT, INSERT, UPDATE, DELETE on ` +
        'it: replicas see it within a minute, with no restart',
    )
  const outcome = settled.outcome === 'unknown' ? null : settled.outcome
  const errorText = settled.outcome === 'error' ? describeError(settled.error) : null
  const statements = statementsOf(table, kind)
  // A run with a row in the history ends it there too, in the same statement.
  const params = (text: string | null) => [jobName, claimToken, durationMs, outcome, text]
  const send = (text: string | null) =>
    runNumber === null
      ? runStatement(db, statements.record, params(text), prepare)
      : runStatement(db, statements.recordRun, [...params(text), runNumber, historyParams(ticket.config)[1]], prepare)
  try {
    await send(errorText)
  } catch (error) {
    // A failed run must never read as the last run's 'ok': text the encoding cannot take is retried in ASCII.
    const code = codeOf(error)
    const ascii = errorText?.replace(/[^\x20-\x7e]/gu, '?') ?? null
    if (ascii !== errorText && (code === '22P05' || code === '22021')) {
      try {
        await send(ascii)
        return warn(logger, `pg-cron-lease: the error of '${jobName}' was recorded in ASCII: ${firstLine(error)}`)
      } catch {
        // Reported below, with the first error.
      }
    }
    warn(logger, `pg-cron-lease: could not record the outcome of '${jobName}' in ${table}: ${firstLine(error)}`)
  }
}

/** `Name: first line` as one clean line: controls as spaces, lone surrogates as U+FFFD, at most 500 units. */
export function describeError(error: unknown): string {
  let name = 'Error'
  try {
    const named = typeof error === 'object' && error !== null && 'name' in error
    name = named ? oneLine(String(error.name)) || 'Error' : typeof error
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

// Lone surrogates as U+FFFD (String#toWellFormed is past our target); controls as spaces: Postgres refuses NUL.
function oneLine(text: string): string {
  const first = text.split(/[\r\n\u0085\u2028\u2029]/, 1)[0] ?? ''
  return first.replace(LONE_SURROGATE, '\ufffd').replace(/\p{Cc}/gu, ' ')
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g
