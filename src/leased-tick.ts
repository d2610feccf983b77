/**
 * A tick wrapper for any scheduler that calls a function on a timer (`setInterval`, croner,
 * node-cron's callback, a NestJS method). It validates everything when it is made, so a wiring
 * mistake throws at startup instead of at the first fire.
 */
import { types } from 'node:util'
import { claimCatchUp } from './catch-up.js'
import { escapeControls } from './escape.js'
import { runClaimed, runConfig, runLease, slotOf } from './lease.js'
import type { CatchUpWindow } from './options.js'
import { describeError } from './outcome.js'
import type { IntervalLease } from './presets.js'
import { parseInstant } from './time-input.js'
import type { LeaseContext, LeaseLogger, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkOptions } from './validate.js'

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
 * - croner passes the job: the occurrence is the scheduled time of `job.currentRun()` (none for a
 *   run started by hand, more than a second after its slot), the next one `job.nextRun()`;
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
      const { occurrence, nextOccurrence } = occurrenceOf(at)
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

/**
 * The occurrence a call names, from what its scheduler passed (see {@link LeasedTick}). A value
 * passed by hand is checked as the options are (a TypeError naming it); a scheduler's is read
 * only when it has the shape that scheduler gives.
 */
function occurrenceOf(at: unknown): { occurrence: number | null; nextOccurrence: number | null } {
  if (typeof at !== 'object' || at === null || types.isProxy(at)) return NONE
  const node = at as { date?: unknown; task?: { getNextRun?: unknown } }
  if (types.isDate(node.date)) {
    const next = typeof node.task?.getNextRun === 'function' ? (node.task.getNextRun as () => unknown)() : null
    return { occurrence: validMs(node.date), nextOccurrence: types.isDate(next) ? validMs(next) : null }
  }
  const croner = at as { currentRun?: unknown; nextRun?: unknown; previousRuns?: unknown }
  if (typeof croner.currentRun === 'function' && typeof croner.previousRuns === 'function') {
    const run = (croner.currentRun as () => unknown).call(at)
    // croner's currentRun() is when the run started, a few ms past its slot: the slot is the
    // latest scheduled time not after it. A run that started far from any slot is one started by
    // hand (job.trigger()), which is for no occurrence: keyed on the last slot, it would be
    // skipped whenever that one had run.
    const slot = types.isDate(run)
      ? (croner.previousRuns as (n: number, from: Date) => unknown[]).call(at, 1, new Date(run.getTime() + 1))[0]
      : undefined
    const slotMs = types.isDate(slot) && types.isDate(run) ? validMs(slot) : null
    const onSlot = slotMs !== null && (run as Date).getTime() - slotMs <= CRONER_SLOT_WINDOW_MS
    const next = typeof croner.nextRun === 'function' ? (croner.nextRun as () => unknown).call(at) : null
    return {
      occurrence: onSlot ? slotMs : null,
      nextOccurrence: types.isDate(next) ? validMs(next) : null,
    }
  }
  if (!('occurrence' in at) && !('nextOccurrence' in at)) return NONE
  const given = checkOptions(at, ['occurrence', 'nextOccurrence'], 'at')
  return {
    occurrence: given.occurrence == null ? null : parseInstant(given.occurrence, 'at.occurrence'),
    nextOccurrence: given.nextOccurrence == null ? null : parseInstant(given.nextOccurrence, 'at.nextOccurrence'),
  }
}

const NONE = Object.freeze({ occurrence: null, nextOccurrence: null })

const NOTHING_CAUGHT_UP: LeaseOutcome<never> = Object.freeze({ ran: false, result: null })

/** How long after its slot a croner run may start and still be that slot's: croner fires within ms of it. */
const CRONER_SLOT_WINDOW_MS = 1000

function validMs(date: Date): number | null {
  const ms = date.getTime()
  return Number.isFinite(ms) ? ms : null
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
