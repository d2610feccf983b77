/**
 * A tick wrapper for any scheduler that calls a function on a timer (`setInterval`, croner,
 * node-cron's callback, a NestJS method). It validates everything when it is made, so a wiring
 * mistake throws at startup instead of at the first fire.
 */
import { escapeControls } from './escape.js'
import { runConfig, runLease } from './lease.js'
import { describeError } from './outcome.js'
import type { LeaseContext, LeaseLogger, LeaseOptions, LeaseOutcome, Queryable } from './types.js'

/**
 * Options for {@link leasedTick}: those of `withCronLease`, plus where errors go. Every key is
 * optional; an unknown key is rejected.
 *
 * @example
 * const opts: LeasedTickOptions = { holder: 'worker-3', onError: (err, job) => report(job, err) }
 */
export interface LeasedTickOptions extends LeaseOptions {
  /**
   * Receives a claim error or an error thrown by the tick. Default: `logger.error(err, jobName)`
   * for every error when a logger with `error` is given; else one line on `console.error`,
   * `pg-cron-lease: '<job>' tick failed: <Name: first line of the message>`, at most once a minute
   * for this job: errors in between are counted, and the next line says how many it did not show.
   * If it throws or rejects, that error is written to `console.error`: the wrapper still resolves.
   */
  onError?: (error: unknown, jobName: string) => void | Promise<void>
}

/**
 * The function {@link leasedTick} returns. Called with no arguments it resolves the outcome;
 * the second signature is the same function as a scheduler sees it (croner's callback must return
 * `void | Promise<void>`, and passes arguments that are ignored). It never rejects.
 *
 * @example
 * const tick: LeasedTick<number> = leasedTick(pool, 'count', 800, () => 42)
 * const outcome = await tick() // { ran: true, result: 42 }, { ran: false, result: null }, or undefined
 */
export interface LeasedTick<T> {
  /** Claims and, on a win, runs the tick: its outcome, or `undefined` after an error (sent to `onError`). */
  (): Promise<LeaseOutcome<T> | undefined>
  /** As a scheduler calls it: the arguments are ignored, the resolved value is not the scheduler's concern. */
  (...schedulerArgs: unknown[]): Promise<void>
}

/**
 * Wraps a tick so any scheduler can call it: each call runs `runTick` through `withCronLease`,
 * so exactly one replica runs each occurrence. The returned function never rejects, because a
 * rejected promise inside `setInterval` or a timer callback is an unhandled rejection that ends
 * the process: a claim error or a tick error goes to `onError` and the call resolves `undefined`.
 * The lease semantics do not change: a failed claim runs nothing, a failed tick keeps its lease.
 *
 * Every argument is checked here, when the wrapper is made (a TypeError, before any query).
 *
 * @example
 * import { Cron } from 'croner'
 * import { LEASE, leasedTick, leaseForInterval } from 'pg-cron-lease'
 *
 * setInterval(leasedTick(pool, 'sync', leaseForInterval(15_000), sync), 15_000)
 * new Cron('0 * * * *', leasedTick(pool, 'billing', LEASE.HOURLY, charge, { onError: alert }))
 */
export function leasedTick<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeasedTickOptions,
): LeasedTick<T> {
  const { options, ...config } = runConfig<T>('leasedTick', db, jobName, leaseMs, runTick, opts)
  const onError = options.onError ?? defaultOnError(config.logger)

  // Schedulers pass their own arguments (node-cron a context, croner the job); none reach the tick.
  const tick = async (): Promise<LeaseOutcome<T> | undefined> => {
    try {
      return await runLease(config)
    } catch (error) {
      try {
        await onError(error, jobName)
      } catch (onErrorFailure) {
        console.error(`pg-cron-lease: onError threw while handling an error of '${jobName}'`, onErrorFailure, error)
      }
      return undefined
    }
  }
  return tick as LeasedTick<T>
}

// A logger is the user's own choice of format and volume, so it gets every error whole; the
// console is nobody's choice, and a stack on every tick of a job that fails each second buries
// everything else on it.
function defaultOnError(logger: LeaseLogger | undefined): (error: unknown, jobName: string) => void {
  const lineFor = errorLines()
  return (error, jobName) => {
    if (logger?.error) logger.error(error, jobName)
    else {
      const line = lineFor(error, jobName)
      if (line !== undefined) console.error(line)
    }
  }
}

/** How long a job's error line stands for the errors after it before another is printed. */
export const ERROR_LINE_EVERY_MS = 60_000

/**
 * The lines of the default `onError` for one job, written to the console: `lineFor(error, job)` is
 * the line to print, or `undefined` (the error counted) while the last line printed is less than
 * {@link ERROR_LINE_EVERY_MS} old. Internal: `readClock` is there for tests, the public API has no clock.
 *
 * @example
 * const lineFor = errorLines()
 * lineFor(new Error('connection refused'), 'sync') // "pg-cron-lease: 'sync' tick failed: Error: connection refused"
 */
export function errorLines(
  readClock: () => number = Date.now,
): (error: unknown, jobName: string) => string | undefined {
  let printedAt: number | undefined
  let unshown = 0
  return (error, jobName) => {
    const at = readClock()
    // A wall clock set back must not silence the job until it catches up, so a negative age prints.
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
