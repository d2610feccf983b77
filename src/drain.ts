/** The graceful shutdown, and its per-process state: whether claims may be sent, and the runs in flight. */
import { escapeControls } from './format-value.js'
import { compileOptions } from './options.js'
import { RECORD_WAIT_MS } from './outcome.js'

/** Runs that shut down together: the process's own, or one NestJS application's (also the process's). */
export type RunGroup = { closed: boolean }

export const runGroup = (): RunGroup => ({ closed: false })

const PROCESS = runGroup()

// The process's runs in flight, in the order they started.
const IN_FLIGHT = new Set<InFlight>()

export const draining = (): boolean => PROCESS.closed

/** One run in flight, from its claim until `end()`, once its outcome is recorded. */
export type InFlight = NonNullable<ReturnType<typeof openRun>>

/** A run in flight, in the process and in `group`; null once either drains: nothing may be sent. */
export function openRun(jobName: string, group?: RunGroup) {
  if (PROCESS.closed || group?.closed) return null
  let listener: ((reason: Error) => void) | undefined
  let end = () => {}
  const run = {
    jobName,
    group,
    stopped: undefined as Error | undefined,
    ended: new Promise<void>((resolve) => (end = resolve)),
    // Called with the reason when a shutdown stops the run (at once if one has); undefined: none.
    onStop(listen: ((reason: Error) => void) | undefined) {
      listener = listen
      if (run.stopped !== undefined) listen?.(run.stopped)
    },
    stop(reason: Error) {
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
  const deadline = performance.now() + timeoutMs
  const runsOf = () => [...IN_FLIGHT].filter((run) => group === PROCESS || run.group === group)
  let left = runsOf()
  while (left.length > 0 && performance.now() < deadline) {
    await settledBy(left, deadline)
    left = runsOf()
  }
  for (const run of left) {
    const message =
      `pg-cron-lease: the process is shutting down: the run of '${escapeControls(run.jobName)}' was still going ` +
      `after ${waited}, so it was aborted and recorded as an error`
    run.stop(new Error(message))
  }
  // A stopped tick records its error within RECORD_WAIT_MS; a claim stuck on the database runs nothing later.
  if (left.length > 0) await settledBy(left, performance.now() + RECORD_WAIT_MS + 100)
  return [...new Set(left.map((run) => run.jobName))]
}

// setTimeout fires at once past 2^31 - 1 ms: a longer wait is made of shorter ones (drainGroup's loop).
const LONGEST_TIMER_MS = 2 ** 31 - 1

async function settledBy(runs: InFlight[], deadline: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const ms = Math.min(Math.max(0, Math.ceil(deadline - performance.now())), LONGEST_TIMER_MS)
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
  /** The jobs still running at `timeoutMs`, each once, in start order: aborted and recorded as errors. */
  readonly timedOut: readonly string[]
}

let drained: Promise<DrainResult> | undefined

/**
 * Shuts down this process's runs: from the call on, no claim is sent (calls resolve `{ ran: false }`). Resolves
 * once every run in flight is recorded; at `opts.timeoutMs` those left are aborted and record that error. A second
 * call returns the first's promise.
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
