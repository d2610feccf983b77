/** leaseCoordinator: a run coordinator for node-cron 4's `distributed` mode; validates everything when made. */
import { publishDrainAbort, publishRunEnd, publishRunStart } from './channels.js'
import { type InFlight, openRun } from './drain.js'
import { claim, runLease } from './lease.js'
import { warn } from './log.js'
import { type CatchUpWindow, compileOptions } from './options.js'
import { describeError, recordOutcome, type Settled } from './outcome.js'
import { coordinatorKeySlot } from './scheduler-slot.js'
import { type ClaimConfig, type Slot, slotOf, type Ticket } from './ticket.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkJobName, checkMs, checkQueryable, fail, readOrFail } from './validate.js'

/** node-cron 4's `RunCoordinator`, written here so the library never imports node-cron. */
export interface LeaseCoordinator {
  /** Claims the lease named by the task in `key`; true only on the winner; false, sending nothing, once draining. */
  shouldRun(key: string, ttlMs: number): Promise<boolean>
  /** Records the run's end (fenced; never rejects). It never releases the lease. */
  onComplete(key: string): Promise<void>
  /** Subscribes to the task's `execution:failed`, so its runs are recorded `ok` or `error`, not `unknown`. */
  watch<Task extends WatchedTask>(task: Task): Task
  /** The listener `watch` subscribes: marks the run of `context.task.name` at `context.date` failed. */
  onExecutionFailed(context: { task?: { name?: unknown }; execution?: { error?: unknown }; date?: unknown }): void
}

/** What {@link LeaseCoordinator.watch} needs of a task; node-cron 4's `ScheduledTask` has it. */
interface WatchedTask {
  name?: string
  on(event: 'execution:failed', listener: LeaseCoordinator['onExecutionFailed']): void
  /** The job's next due time, stored by each claim the task wins. */
  getNextRun?(): Date | null
  /** Runs the task without the coordinator: a catch-up run. */
  execute?(): Promise<unknown>
}

/** Options for {@link leaseCoordinator}. */
export interface LeaseCoordinatorOptions
  extends Pick<LeaseOptions, 'table' | 'holder' | 'logger' | 'prepare' | 'record' | 'history' | 'clockToleranceMs'> {
  /**
   * Make up a watched task's missed occurrence by `task.execute()`, as `catchUp` does. Claims for `leaseMs`,
   * else 30 s (a coordinator cannot read `distributedLease`). Default: off.
   */
  catchUp?: CatchUpWindow
  /** The lease in ms, or a function of the task name. Default: the task's `distributedLease`. */
  leaseMs?: number | ((taskName: string) => number)
}

/**
 * A node-cron 4 run coordinator on the lease table: the claim is on the task name, keyed on node-cron's slot, so no
 * slot runs twice however late a timer fires. The lease is held to expiry; a claim error rejects ("skip this fire").
 *
 * @example
 * const coordinator = leaseCoordinator(pool)
 * coordinator.watch(cron.schedule('* * * * *', sendReport, { name: 'report', distributed: true, runCoordinator: coordinator }))
 */
export function leaseCoordinator(db: Queryable, opts?: LeaseCoordinatorOptions): LeaseCoordinator {
  checkQueryable(db)
  const options = compileOptions('leaseCoordinator', opts)
  const { leaseMs: lease, logger, record, catchUp } = options
  // Runs by node-cron's key; only a watched task's run is known to succeed; a previous slot gives an interval.
  const running = new Map<string, Run>()
  const watched = new Map<string, WatchedTask>()
  const lastSlot = new Map<string, number>()

  const configOf = (jobName: string, fallbackMs: () => number): ClaimConfig => {
    const ms = typeof lease === 'function' ? checkMs(lease(jobName), `opts.leaseMs('${jobName}')`) : lease
    return { ...options, db, jobName, leaseMs: ms ?? fallbackMs() }
  }

  const slotFor = (jobName: string, occurrence: number): Slot => {
    const slot = slotOf(occurrence, nextRunOf(watched.get(jobName)), undefined) as Slot
    const previous = lastSlot.get(jobName)
    if (lastSlot.size >= 1000) lastSlot.clear()
    lastSlot.set(jobName, occurrence)
    const gap = previous !== undefined && occurrence > previous ? occurrence - previous : null
    return { ...slot, intervalMs: slot.intervalMs ?? gap }
  }
  // Once per run, by onComplete or a shutdown; an unwatched task may have thrown unheard (no execution:failed).
  const complete = async (key: string, run: Run) => {
    if (running.get(key) !== run) return
    running.delete(key)
    const { ticket, startedAt, open, failed } = run
    const heard = watched.has(ticket.config.jobName)
    const settled: Settled = failed ? { outcome: 'error', error: failed[0] } : { outcome: heard ? 'ok' : 'unknown' }
    const durationMs = performance.now() - startedAt
    // Neither rejects.
    if (record) await recordOutcome(ticket, durationMs, settled)
    publishRunEnd(ticket, settled, durationMs)
    open.end()
  }

  const coordinator: LeaseCoordinator = {
    async shouldRun(key: string, ttlMs: number): Promise<boolean> {
      const { name, occurrence } = coordinatorKeySlot(key)
      const jobName = checkJobName(name, 'the task name in key')
      const config = configOf(jobName, () => checkMs(ttlMs, 'ttlMs (distributedLease)'))
      // In flight for drainLeases from the claim to onComplete's record: node-cron runs the task between.
      const open = openRun(jobName)
      if (open === null) return false
      let ticket: Ticket | null = null
      try {
        ticket = await claim(config, slotFor(jobName, occurrence))
      } finally {
        if (ticket === null) open.end()
      }
      if (ticket === null) return false
      const run: Run = { ticket, startedAt: performance.now(), open }
      running.set(key, run)
      publishRunStart(ticket)
      // A shutdown cannot tell node-cron's task; the run is recorded as stopped, and onComplete finds nothing.
      open.onStop((reason) => {
        publishDrainAbort(ticket, reason)
        run.failed = [reason]
        void complete(key, run)
      })
      return true
    },
    // Releasing here would let a replica whose timer fires late run the same occurrence again.
    async onComplete(key: string): Promise<void> {
      const run = running.get(key)
      if (run) await complete(key, run)
    },
    watch(task) {
      const rule = 'a node-cron task (what cron.schedule returns: a name and an on(event, listener) method)'
      const name = readOrFail(task, 'name', 'task', rule)
      if (typeof readOrFail(task, 'on', 'task', rule) !== 'function') fail('task', rule, task)
      const jobName = checkJobName(name, 'task.name')
      watched.set(jobName, task)
      task.on('execution:failed', coordinator.onExecutionFailed)
      if (catchUp !== undefined && typeof task.execute === 'function') void catchUpTask(jobName, task, catchUp.withinMs)
      return task
    },
    onExecutionFailed(context): void {
      const name = context?.task?.name
      const slot = context?.date
      // The slot names the very run: a task.execute() beside it must not mark it. No date: every run of the task.
      const key = slot instanceof Date && !Number.isNaN(slot.getTime()) ? `${String(name)}:${slot.toISOString()}` : null
      for (const [runKey, run] of running) {
        const matches = key === null ? run.ticket.config.jobName === name : runKey === key
        if (matches) run.failed = [context?.execution?.error]
      }
    },
  }
  // Run by `task.execute()`: its rejection is the run's error, recorded as any run's, not a failed catch-up.
  async function catchUpTask(jobName: string, task: WatchedTask, withinMs: number): Promise<void> {
    let won = false
    try {
      const runTick = () => {
        won = true
        return (task.execute as () => Promise<unknown>).call(task)
      }
      const slot = { occurrence: null, nextOccurrence: nextRunOf(task), intervalMs: null }
      await runLease({ ...configOf(jobName, () => DEFAULT_TTL_MS), runTick }, slot, undefined, withinMs)
    } catch (error) {
      if (!won) warn(logger, `pg-cron-lease: could not catch up '${jobName}': ${describeError(error)}`)
    }
  }

  return Object.freeze(coordinator)
}

// `failed` is a box, so a task that throws `undefined` still failed.
type Run = { ticket: Ticket; startedAt: number; failed?: unknown[]; open: InFlight }

function nextRunOf(task: WatchedTask | undefined): number | null {
  try {
    const at = typeof task?.getNextRun === 'function' ? task.getNextRun() : null
    return at instanceof Date && Number.isFinite(at.getTime()) ? at.getTime() : null
  } catch {
    return null
  }
}

// node-cron's `distributedLease` when a task sets none: what a catch-up claims for without one.
const DEFAULT_TTL_MS = 30_000
