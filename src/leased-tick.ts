/** A tick wrapper for any scheduler that calls a function on a timer; validates when made. */
import { escapeControls } from './format-value.js'
import { NOT_RUN, runCatchUp, runConfig, runLease } from './lease.js'
import type { CatchUpWindow } from './options.js'
import { describeError } from './outcome.js'
import type { IntervalLease } from './presets.js'
import { fireSlot } from './scheduler-slot.js'
import { slotOf } from './ticket.js'
import type { LeaseContext, LeaseOptions, LeaseOutcome, Queryable } from './types.js'

/** Options for {@link leasedTick}: those of `withCronLease`, plus where errors go. */
export interface LeasedTickOptions extends Omit<LeaseOptions, 'occurrence' | 'nextOccurrence'> {
  /** Run {@link catchUp} in the background when made; `tick.caughtUp` settles with it. Default: off. */
  catchUp?: CatchUpWindow
  /**
   * Receives a claim or tick error. Default: `logger.error(err, jobName)`, else one line on
   * `console.error` at most once a minute per job. If it throws, `console.error` gets that.
   */
  onError?: (error: unknown, jobName: string) => void | Promise<void>
}

/** Which occurrence a call by hand is for, as in `LeaseOptions`: `tick({ occurrence, nextOccurrence })`. */
export type TickOccurrence = Pick<LeaseOptions, 'occurrence' | 'nextOccurrence'>

/**
 * The function {@link leasedTick} returns; it never rejects. Its first argument (under the `cron` package, `this`)
 * names the occurrence: a scheduler's context or job, a {@link TickOccurrence}, or nothing (docs/schedulers.md).
 *
 * @example
 * const outcome = await tick() // { ran: true, result: 42 }, { ran: false, result: null }, or undefined
 */
export interface LeasedTick<T> {
  /** Claims and, on a win, runs the tick: its outcome, or `undefined` after an error (sent to `onError`). */
  (at?: TickOccurrence): Promise<LeaseOutcome<T> | undefined>
  (...schedulerArgs: unknown[]): Promise<void>
  /** The catch-up run `opts.catchUp` started; never rejects. Await it before ending the pool. */
  readonly caughtUp: Promise<LeaseOutcome<T> | undefined>
}

/**
 * Wraps a tick so any scheduler can call it, through `withCronLease`. It never rejects: a rejection
 * in a timer callback would end the process, so errors go to `onError`.
 *
 * @example
 * setInterval(leasedTick(pool, 'sync', leaseForInterval(15_000), sync), 15_000)
 */
export function leasedTick<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeasedTickOptions,
): LeasedTick<T> {
  const config = runConfig<T>('leasedTick', db, jobName, leaseMs, runTick, opts)
  const lineFor = errorLines()
  // A logger gets every error whole; on the console a stack every tick would bury everything else.
  const onError =
    config.options.onError ??
    ((error: unknown) => {
      if (config.logger?.error) return config.logger.error(error, jobName)
      const line = lineFor(error, jobName)
      if (line !== undefined) console.error(line)
    })
  const report = async (error: unknown) => {
    try {
      await onError(error, jobName)
    } catch (onErrorFailure) {
      console.error(`pg-cron-lease: onError threw while handling an error of '${jobName}'`, onErrorFailure, error)
    }
    return undefined
  }

  // A function, not an arrow: the `cron` package passes its job as `this`.
  async function tick(this: unknown, at?: unknown): Promise<LeaseOutcome<T> | undefined> {
    try {
      const { occurrence, nextOccurrence } = fireSlot(this, at)
      return await runLease(config, slotOf(occurrence, nextOccurrence, config.everyMs))
    } catch (error) {
      return report(error)
    }
  }
  const window = config.options.catchUp?.withinMs
  const caughtUp = window === undefined ? Promise.resolve(NOT_RUN) : runCatchUp(config, undefined, window).catch(report)
  return Object.assign(tick, { caughtUp }) as LeasedTick<T>
}

export const ERROR_LINE_EVERY_MS = 60_000

// The default `onError`'s console lines for one job, at most one per ERROR_LINE_EVERY_MS.
export function errorLines(readClock = Date.now): (error: unknown, jobName: string) => string | undefined {
  let printedAt: number | undefined
  let unshown = 0
  return (error, jobName) => {
    const at = readClock()
    // A wall clock set back must not silence the job, so a negative age prints.
    if (printedAt !== undefined && at >= printedAt && at - printedAt < ERROR_LINE_EVERY_MS) {
      unshown++
      return undefined
    }
    const since = unshown > 0 ? ` (${unshown} more not shown since ${new Date(printedAt!).toISOString()})` : ''
    printedAt = at
    unshown = 0
    return `pg-cron-lease: '${escapeControls(jobName)}' tick failed: ${describeError(error)}${since}`
  }
}
