/** The graceful shutdown, and its per-process state: whether claims may be sent, and the runs in flight. */
import { monotonicMs } from './clock.js'
import { escapeControls } from './escape.js'
import { compileOptions } from './options.js'
import { RECORD_WAIT_MS } from './outcome.js'

/** One run in flight, from its claim until `end()`, once its outcome is recorded. */
export interface InFlight {
  readonly jobName: string
  readonly group: RunGroup | undefined
  /** The shutdown's reason, once one stopped the run. */
  stopped: Error | undefined
  /** Called with the reason when a shutdown stops the run (at once if one has); undefined: none. */
  onStop(listener: ((reason: Error) => void) | undefined): void
  stop(reason: Error): void
  end(): void
  readonly ended: Promise<void>
}

/** Runs that shut down together: the process's own, or one NestJS application's (also the process's). */
export interface RunGroup {
  closed: boolean
}

export function runGroup(): RunGroup {
  return { closed: false }
}

const PROCESS = runGroup()

// The process's runs in flight, in the order they started.
const IN_FLIGHT = new Set<InFlight>()

export function draining(): boolean {
  return PROCESS.closed
}

/** A run in flight, in the process and in `group`; null once either drains: nothing may be sent. */
export function openRun(jobName: string, group?: RunGroup): InFlight | null {
  if (PROCESS.closed || group?.closed) return null
  let listener: ((reason: Error) => void) | undefined
  let end = () => {}
  const ended = new Promise<void>((resolve) => (end = resolve))
  const run: InFlight = {
    jobName,
    group,
    stopped: undefined,
    ended,
    onStop(listen) {
      listener = listen
      if (run.stopped !== undefined) listen?.(run.stopped)
    },
    stop(reason) {
      if (run.stopped !== undefined) return
      run.stopped = reason
      listener?.(reason)
    },
    end() {
      IN_FLIGHT.delete(run)
      end()
    },
  }
  IN_FLIGHT.add(run)
  return run
}

/** `tick()`, until a shutdown stops `run`: then `stop` is called and it rejects with the reason. */
export function untilStopped<T>(run: InFlight, stop: (reason: Error) => void, tick: () => Promise<T> | T): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    run.onStop((reason) => {
      stop(reason)
      reject(reason)
    })
    if (run.stopped === undefined) Promise.resolve(tick()).then(resolve, reject)
  })
}

/** Closes `group`, waits up to `timeoutMs` for its runs, stops those left and resolves with their job names. */
export async function drainGroup(group: RunGroup, timeoutMs: number, waited: string): Promise<string[]> {
  group.closed = true
  const deadline = monotonicMs() + timeoutMs
  const runsOf = () => [...IN_FLIGHT].filter((run) => group === PROCESS || run.group === group)
  let left = runsOf()
  while (left.length > 0 && monotonicMs() < deadline) {
    await settledBy(left, deadline)
    left = runsOf()
  }
  for (const run of left) run.stop(shutdownError(run.jobName, waited))
  // A stopped tick records its error in at most RECORD_WAIT_MS; a claim stuck on the database is not
  // waited for longer (it runs nothing once it returns).
  if (left.length > 0) await settledBy(left, monotonicMs() + RECORD_WAIT_MS + 100)
  return [...new Set(left.map((run) => run.jobName))]
}

function shutdownError(jobName: string, waited: string): Error {
  return new Error(
    `pg-cron-lease: the process is shutting down: the run of '${escapeControls(jobName)}' was still going after ` +
      `${waited}, so it was aborted and recorded as an error`,
  )
}

// setTimeout fires at once past 2^31 - 1 ms: a longer wait is made of shorter ones (drainGroup's loop).
const LONGEST_TIMER_MS = 2 ** 31 - 1

async function settledBy(runs: InFlight[], deadline: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const ms = Math.min(Math.max(0, Math.ceil(deadline - monotonicMs())), LONGEST_TIMER_MS)
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))
  await Promise.race([Promise.all(runs.map((run) => run.ended)), late])
  clearTimeout(timer)
}

/** Options for {@link drainLeases}. */
export interface DrainOptions {
  /** How long to wait for the runs in flight before aborting them, in ms (0: at once). Default: 10,000. */
  timeoutMs?: number | null
}

/** What {@link drainLeases} resolves to. */
export interface DrainResult {
  /**
   * The jobs with a run still going at `timeoutMs`, each once, in the order their runs started:
   * each had its `ctx.signal` aborted and was recorded as an error. Empty when all settled.
   */
  readonly timedOut: readonly string[]
}

let drained: Promise<DrainResult> | undefined

/**
 * Shuts down every entry point of this process gracefully: from the call on, no claim is sent, and
 * each call resolves `{ ran: false, result: null }` (the coordinator's `shouldRun` false). Resolves
 * once every run in flight has settled and recorded its outcome; at `opts.timeoutMs` those left
 * are aborted (their call rejects) and recorded as errors. A second call returns the first's promise.
 * End the pool after it.
 *
 * @example
 * process.once('SIGTERM', async () => {
 *   const { timedOut } = await drainLeases({ timeoutMs: 20_000 })
 *   if (timedOut.length > 0) console.warn('aborted at shutdown:', timedOut)
 *   await pool.end()
 * })
 */
export function drainLeases(opts?: DrainOptions): Promise<DrainResult> {
  try {
    const { timeoutMs } = compileOptions('drainLeases', opts)
    drained ??= drainGroup(PROCESS, timeoutMs, `drainLeases' timeoutMs (${timeoutMs} ms)`).then((timedOut) =>
      Object.freeze({ timedOut: Object.freeze(timedOut) }),
    )
    return drained
  } catch (error) {
    return Promise.reject(error)
  }
}
