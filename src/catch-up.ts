/** Catching up, opt in: a fleet that was down when a job fell due runs it once when back. */
import { publishClaim } from './channels.js'
import { monotonicMs } from './clock.js'
import { checkKeepAliveHandle } from './context.js'
import { draining, type RunGroup } from './drain.js'
import { knowledgeOf } from './handle.js'
import { claimError, claimKind, runConfig, runTracked, scheduleParams, tableMissing } from './lease.js'
import { warnShape } from './log.js'
import type { CatchUpWindow } from './options.js'
import type { IntervalLease } from './presets.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { statementsOf } from './statements.js'
import { shapeOf } from './table-facts.js'
import { type ClaimConfig, firstRow, historyParams, type Slot, type Ticket, wonTicket } from './ticket.js'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from './types.js'

/**
 * Options for {@link catchUp}: `withinMs` is required.
 *
 * @example
 * const opts: CatchUpOptions = { withinMs: 6 * 3_600_000, everyMs: 3_600_000 }
 */
export interface CatchUpOptions
  extends Pick<
      LeaseOptions,
      'holder' | 'table' | 'logger' | 'keepAlive' | 'prepare' | 'record' | 'history' | 'everyMs'
    >,
    CatchUpWindow {
  /** When this replica's scheduler fires next; left out, one interval after the occurrence made up for. */
  nextOccurrence?: Date | string | null
}

/**
 * Runs the tick once when the job's due occurrence passed unclaimed within `withinMs`, on at most
 * one replica; a backlog collapses into the latest occurrence. Never for a job with no recorded
 * due time, so a fresh install cannot stampede.
 *
 * @example
 * await catchUp(pool, 'report', LEASE.HOURLY, sendReport, { withinMs: 6 * 3_600_000, everyMs: 3_600_000 })
 */
export async function catchUp<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts: CatchUpOptions,
): Promise<LeaseOutcome<T>> {
  return runCatchUp(runConfig<T>('catchUp', db, jobName, leaseMs, runTick, opts))
}

/** {@link catchUp} with its arguments checked; its run is in `group` too, when given. */
export function runCatchUp<T>(config: ReturnType<typeof runConfig<T>>, group?: RunGroup): Promise<LeaseOutcome<T>> {
  // The next occurrence as given, not derived: left out, the database takes the one after the
  // occurrence made up for, which it knows better than now + everyMs.
  const slot = { occurrence: null, nextOccurrence: config.nextOccurrence, intervalMs: config.everyMs ?? null }
  return runTracked(config, () => claimCatchUp(config, config.options.withinMs, slot), group)
}

/** The catch-up claim alone (leaseCoordinator runs no tick): the won ticket, or null. */
export async function claimCatchUp(config: ClaimConfig, withinMs: number, slot: Slot | null): Promise<Ticket | null> {
  const { db, table, jobName, holder, logger, prepare } = config
  const shape = await shapeOf(config)
  checkKeepAliveHandle(config)
  // No table is a miss to report, as a claim reports it; the original shape keeps no due time.
  if (shape === undefined) throw tableMissing(table)
  if (shape === 'original') warnShape(table, logger)
  // A run that began before drainLeases sends no claim after it.
  if (shape !== 'current' || draining()) return null
  const kind = claimKind(config, shape, knowledgeOf(db, table))
  const sentAt = monotonicMs()
  const params: unknown[] = [jobName, config.leaseMs, holder, withinMs, ...scheduleParams(slot, Date.now())]
  if (kind === 'history') params.push(...historyParams(config))
  const { catchUp } = statementsOf(table, kind)
  const claimed = runStatement(db, catchUp, params, prepare)
  const result = await claimed.catch((error: unknown) => Promise.reject(claimError(config, error)))
  const { matched: won, claimToken } = readResult(result, jobName, 'claimed to catch up')
  publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs: null }))
  return won ? wonTicket(config, claimToken, sentAt, kind, firstRow(result), slot, true) : null
}
