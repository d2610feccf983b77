/** Catching up, opt in: a fleet that was down when a job fell due runs it once when back. */
import type { RunGroup } from './drain.js'
import { claim, runConfig, runTracked } from './lease.js'
import type { CatchUpWindow } from './options.js'
import type { IntervalLease } from './presets.js'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from './types.js'

/** Options for {@link catchUp}: `withinMs` is required. */
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
 * Runs the tick once when the job's due occurrence passed unclaimed within `withinMs`, on at most one replica;
 * a backlog collapses into the latest. Never for a job with no recorded due time: a fresh install cannot stampede.
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

// Also leasedTick's. The next occurrence as given: left out, the database derives it better than now + everyMs.
export function runCatchUp<T>(
  config: ReturnType<typeof runConfig<T>>,
  group?: RunGroup,
  withinMs = config.options.withinMs,
): Promise<LeaseOutcome<T>> {
  const slot = { occurrence: null, nextOccurrence: config.nextOccurrence, intervalMs: config.everyMs ?? null }
  return runTracked(config, () => claim(config, slot, withinMs), group)
}
