/**
 * A tick wrapper for any scheduler that calls a function on a timer (`setInterval`, croner,
 * node-cron's callback, a NestJS method). It validates everything when it is made, so a wiring
 * mistake throws at startup instead of at the first fire.
 */
import { claimCatchUp } from './catch-up.js'
import { escapeControls } from './escape.js'
import { runClaimed, runConfig, runLease } from './lease.js'
import type { CatchUpWindow } from './options.js'
import { describeError } from './outcome.js'
import type { IntervalLease } from './presets.js'
import { schedulerSlot } from './scheduler-slot.js'
import { slotOf } from './ticket.js'
import type { LeaseContext, LeaseLogger, LeaseOptions, LeaseOutcome, Queryable } from './types.js'

/**
 * Options for {@link leasedTick}: those of `withCronLease`, plus where errors go. Every key is
 * optional; an unknown key is rejected.
 *
 * @example
 * const opts: LeasedTickOptions = { holder: 'worker-3', onError: (err, job) => report(job, err) }
 */
export interface LeasedTickOptions extends Omit<LeaseOptions, 'occurrence' | 'nextOccurrence'> {
  /**
   * Make up for a missed occurrence when the wrapper is made: it calls {@link catchUp} with
   * `withinMs` (and the wrapper's other options) at once, in the background, with errors going to
   * `onError`; `tick.caughtUp` resolves once it has settled. Default: off. For jobs where late
   * beats never; not for a charge.
   */
  catchUp?: CatchUpWindow
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
 * Which occurrence one call of a {@link LeasedTick} is for, when it is called by hand:
 * `tick({ occurrence, nextOccurrence })`. Both as in `LeaseOptions`.
 *
 * @example
 * const at: TickOccurrence = { occurrence: new Date('2026-12-01T09:00:00Z'), nextOccurrence: new Date('2026-12-02T09:00:00Z') }
 */
export interface TickOccurrence {
  /** The scheduled time of the occurrence this call is for. */
  occurrence?: Date | string | null
  /** When this replica's scheduler fires next. */
  nextOccurrence?: Date | string | null
}

/**
 * The function {@link leasedTick} returns. It never rejects. Each call learns which occurrence it
 * is for from its first argument, so passing the wrapper straight to a scheduler keys its claims:
 * - node-cron 4 passes its context: the occurrence is `ctx.date`, the next one `ctx.task.getNextRun()`;
 * - croner passes the job: the occurrence is the latest scheduled time at or before the run
 *   started, however late (a `job.trigger()` too: it runs only if no replica ran that slot), the
 *   next one `job.nextRun()`;
 * - the `cron` package's job (`function () { tick(this) }`): the latest slot at or before `lastDate()`;
 * - by hand, pass `{ occurrence, nextOccurrence }` ({@link TickOccurrence});
 * - with no argument (`setInterval`, NestJS `@Interval`) no occurrence is named; with `everyMs`,
 *   the next one is one interval away.
 * Any other argument is ignored, as before.
 *
 * @example
 * const tick: LeasedTick<number> = leasedTick(pool, 'count', 800, () => 42)
 * const outcome = await tick() // { ran: true, result: 42 }, { ran: false, result: null }, or undefined
 */
export interface LeasedTick<T> {
  /** Claims and, on a win, runs the tick: its outcome, or `undefined` after an error (sent to `onError`). */
  (at?: TickOccurrence): Promise<LeaseOutcome<T> | undefined>
  /** As a scheduler calls it: the resolved value is not the scheduler's concern. */
  (...schedulerArgs: unknown[]): Promise<void>
  /**
   * The catch-up run `opts.catchUp` started when the wrapper was made: its outcome (`ran: false`
   * when there was nothing to make up for, or without `catchUp`), or `undefined` after an error
   * (sent to `onError`). Never rejects. Wait for it before ending the pool on shutdown.
   */
  readonly caughtUp: Promise<LeaseOutcome<T> | undefined>
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
  leaseMs: number | IntervalLease,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeasedTickOptions,
): LeasedTick<T> {
  const {
    options,
    slot: _,
    nextOccurrence: __,
    ...config
  } = runConfig<T>('leasedTick', db, jobName, leaseMs, runTick, opts)
  const onError = options.onError ?? defaultOnError(config.logger)
  const report = async (error: unknown) => {
    try {
      await onError(error, jobName)
    } catch (onErrorFailure) {
      console.error(`pg-cron-lease: onError threw while handling an error of '${jobName}'`, onErrorFailure, error)
    }
  }

  // Schedulers pass their own arguments (node-cron a context, croner the job); none reach the tick.
  const tick = async (at?: unknown): Promise<LeaseOutcome<T> | undefined> => {
    try {
      const { occurrence, nextOccurrence } = schedulerSlot(at)
      return await runLease(config, slotOf(occurrence, nextOccurrence, config.everyMs))
    } catch (error) {
      await report(error)
      return undefined
    }
  }
  let caughtUp: Promise<LeaseOutcome<T> | undefined> = Promise.resolve(NOTHING_CAUGHT_UP)
  if (options.catchUp !== undefined) {
    const window = options.catchUp.withinMs
    const slot = { occurrence: null, nextOccurrence: null, intervalMs: config.everyMs ?? null }
    caughtUp = claimCatchUp(config, window, slot)
      .then((ticket) => (ticket === null ? NOTHING_CAUGHT_UP : runClaimed(config, ticket)))
      .catch(async (error: unknown) => {
        await report(error)
        return undefined
      })
  }
  return Object.assign(tick, { caughtUp }) as LeasedTick<T>
}

const NOTHING_CAUGHT_UP: LeaseOutcome<never> = Object.freeze({ ran: false, result: null })

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
