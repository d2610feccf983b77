/**
 * Catching up, opt in: a fleet that was down when a job fell due runs it once when it comes back,
 * for the latest occurrence due, instead of never.
 */
import { publishClaim } from './channels.js'
import { monotonicMs } from './context.js'
import { type ClaimConfig, nextDueMs, runClaimed, runConfig, type Slot, type Ticket } from './lease.js'
import type { CatchUpWindow } from './options.js'
import { warnShape } from './outcome.js'
import type { IntervalLease } from './presets.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { OCCURRENCE_COLUMNS, quoteTable, tableColumnsSql } from './sql.js'
import { handleState, tableState } from './state.js'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from './types.js'

/**
 * Options for {@link catchUp}: `withinMs` is required; the others are those of `withCronLease`
 * that apply to a run it makes.
 *
 * @example
 * const opts: CatchUpOptions = { withinMs: 6 * 3_600_000, everyMs: 3_600_000 }
 */
export interface CatchUpOptions
  extends Pick<LeaseOptions, 'holder' | 'table' | 'logger' | 'keepAlive' | 'prepare' | 'record' | 'everyMs'>,
    CatchUpWindow {
  /** When this replica's scheduler fires next; left out, one interval after the occurrence made up for. */
  nextOccurrence?: Date | string | null
}

/**
 * Runs the tick once, at once, when the job's due occurrence passed unclaimed no more than
 * `withinMs` ago; otherwise resolves `{ ran: false, result: null }`. Call it when a replica
 * starts. Across the whole fleet at most one replica runs it, even when all start together, and a
 * backlog collapses into one run: the one for the latest occurrence due, which is its
 * `ctx.occurrence`, while `ctx.missed` counts the earlier ones it skipped.
 *
 * It never runs for a job with no recorded due time (a fresh table, a job never claimed with an
 * occurrence or an interval), so a fresh install cannot stampede; nor on a table without the
 * occurrence columns (one warning names `pg-cron-lease migrate`). Off unless called: it is for
 * jobs where late beats never (a report, a sync), not for a charge.
 *
 * @example
 * const job = new Cron('0 * * * *', leasedTick(pool, 'report', LEASE.HOURLY, sendReport))
 * await catchUp(pool, 'report', LEASE.HOURLY, sendReport, { withinMs: 6 * 3_600_000, everyMs: 3_600_000 })
 */
export async function catchUp<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts: CatchUpOptions,
): Promise<LeaseOutcome<T>> {
  const config = runConfig<T>('catchUp', db, jobName, leaseMs, runTick, opts)
  // The next occurrence as given, not derived: left out, the database takes the one after the
  // occurrence made up for, which it knows better than now + everyMs.
  const slot = { occurrence: null, nextOccurrence: config.nextOccurrence, intervalMs: config.everyMs ?? null }
  const ticket = await claimCatchUp(config, config.options.withinMs, slot)
  return ticket === null ? { ran: false, result: null } : runClaimed(config, ticket)
}

/**
 * The catch-up claim on its own (leaseCoordinator runs no tick itself): null when there is
 * nothing to catch up, the ticket of a won catch-up otherwise. The table's shape is read first
 * when no claim has said it: this runs once per start, and must not name a column the table may
 * lack.
 */
export async function claimCatchUp(config: ClaimConfig, withinMs: number, slot: Slot | null): Promise<Ticket | null> {
  const { db, table, jobName, leaseMs, holder, logger, prepare } = config
  const state = tableState(table)
  const known = handleState(db)
  if (!known.keyed.has(table)) {
    const result = await runStatement(db, tableColumnsSql(), [quoteTable(table)], false)
    const columns = (result as { rows?: { columns?: unknown }[] } | null)?.rows?.[0]?.columns
    const has = Array.isArray(columns) ? (columns as unknown[]) : []
    if (!OCCURRENCE_COLUMNS.every((name) => has.includes(name))) {
      if (has.length > 0) warnShape(table, logger, has.includes('last_outcome'))
      return null
    }
    known.keyed.add(table)
  }
  const sentAt = monotonicMs()
  const result = await runStatement(
    db,
    state.catchUp,
    [
      jobName,
      leaseMs,
      holder,
      withinMs,
      nextDueMs(slot, Date.now()),
      slot?.intervalMs ?? null,
      slot?.nextOccurrence ?? null,
    ],
    prepare,
  )
  const { matched: won, claimToken } = readResult(result, jobName, 'claimed to catch up')
  publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs: null }))
  if (!won) return null
  const row = (result as { rows?: Record<string, unknown>[] }).rows?.[0]
  const occurrence = typeof row?.occurrence === 'string' ? new Date(row.occurrence) : null
  const missed = Number(row?.missed ?? 0)
  const everyMs = Number(row?.every_ms)
  return {
    config,
    claimToken,
    sentAt,
    recordable: true,
    occurrence: occurrence !== null && Number.isFinite(occurrence.getTime()) ? occurrence : null,
    missed: Number.isSafeInteger(missed) && missed > 0 ? missed : 0,
    intervalMs: slot?.intervalMs ?? (Number.isFinite(everyMs) && everyMs > 0 ? everyMs : null),
  }
}
