/**
 * A run coordinator for node-cron 4's `distributed` mode, backed by the lease table. It
 * validates everything when it is made, so a wiring mistake throws at startup.
 */
import { claimCatchUp } from './catch-up.js'
import { monotonicMs } from './clock.js'
import { claim } from './lease.js'
import { warn } from './log.js'
import { type CatchUpWindow, compileOptions } from './options.js'
import { describeError, recordOutcome, type Settled } from './outcome.js'
import { coordinatorKeySlot } from './scheduler-slot.js'
import type { Slot, Ticket } from './ticket.js'
import type { LeaseOptions, Queryable } from './types.js'
import { checkJobName, checkMs, checkQueryable, fail } from './validate.js'

/**
 * The shape of node-cron 4's `RunCoordinator`, written here so the library never imports
 * node-cron: a coordinator is any object with these methods.
 *
 * @example
 * import cron from 'node-cron'
 * const coordinator: LeaseCoordinator = leaseCoordinator(pool)
 * cron.setRunCoordinator(coordinator)
 */
export interface LeaseCoordinator {
  /** Claims the lease named by the task in `key`; resolves true only on the replica that won. */
  shouldRun(key: string, ttlMs: number): Promise<boolean>
  /**
   * Records the run's end in the lease row (fenced on its claim; never rejects). It never
   * releases the lease: that is held until it expires.
   */
  onComplete(key: string): Promise<void>
  /**
   * Makes this coordinator hear the task's failures, so each of its runs is recorded `ok`, or
   * `error` with the error's first line. It subscribes {@link LeaseCoordinator.onExecutionFailed}
   * to the task's `execution:failed` event, which node-cron emits before `onComplete`, and
   * remembers the task's name. Runs of a task that is not watched are recorded with no outcome,
   * because node-cron does not tell `onComplete` whether the task threw: a run that is not
   * known to have succeeded is never recorded as a success. Returns the task; a value that is not
   * a node-cron task is a TypeError.
   *
   * @example
   * const coordinator = leaseCoordinator(pool)
   * const task = coordinator.watch(
   *   cron.schedule('* * * * *', run, { name: 'report', distributed: true, runCoordinator: coordinator }),
   * )
   */
  watch<Task extends WatchedTask>(task: Task): Task
  /**
   * The listener {@link LeaseCoordinator.watch} subscribes: marks the run of `context.task.name`
   * whose slot is `context.date` as failed, with `context.execution.error`. Subscribed by hand
   * (`task.on('execution:failed', coordinator.onExecutionFailed)`), failures are recorded but a
   * run without one still has no outcome, since the coordinator cannot know the task is wired.
   */
  onExecutionFailed(context: { task?: { name?: unknown }; execution?: { error?: unknown }; date?: unknown }): void
}

/** What {@link LeaseCoordinator.watch} needs of a task; node-cron 4's `ScheduledTask` has it. */
interface WatchedTask {
  /** The task's name, which the lease is claimed on. */
  name?: string
  /** node-cron's event subscription. */
  on(event: 'execution:failed', listener: LeaseCoordinator['onExecutionFailed']): void
  /** When the task runs next: stored as the job's next due time by each claim the task wins. */
  getNextRun?(): Date | null
  /** Runs the task now, without the coordinator: what a catch-up run is. */
  execute?(): Promise<unknown>
}

/**
 * Options for {@link leaseCoordinator}. Every key is optional; an unknown key is rejected.
 *
 * @example
 * const opts: LeaseCoordinatorOptions = { leaseMs: (task) => (task === 'report' ? LEASE.HOURLY : LEASE.EVERY_MINUTE) }
 */
export interface LeaseCoordinatorOptions
  extends Pick<LeaseOptions, 'table' | 'holder' | 'logger' | 'prepare' | 'record' | 'clockToleranceMs'> {
  /**
   * Make up for a missed occurrence of each task passed to `watch`, when it is watched: as
   * `catchUp` does, the one replica that wins runs `task.execute()` once. Default: off. The
   * catch-up claims for `leaseMs` (the option, or its function of the task name); without it, for
   * node-cron's default 30 s, as a coordinator cannot read a task's `distributedLease`: set
   * `leaseMs` when a run may last longer.
   */
  catchUp?: CatchUpWindow
  /**
   * The lease length in ms, or a function of the task name returning it. Default: the task's
   * `distributedLease` (node-cron's `ttlMs`, itself 30000 by default), which should then be set to
   * about 80% of the interval (see `LEASE`, `leaseForInterval`).
   */
  leaseMs?: number | ((taskName: string) => number)
}

/**
 * A node-cron 4 run coordinator backed by the lease table. Set it on a task (`distributed: true`,
 * a `name`, `runCoordinator`) or for every task with `cron.setRunCoordinator`.
 *
 * node-cron's key is the task name and the slot it fires for (`report:2026-12-01T09:00:00.000Z`).
 * The claim is made on the task name, keyed on the slot as its occurrence: the first replica to
 * claim a slot runs it, and no replica runs that slot, or an earlier one, again, however late its
 * timer fires (on a table with the occurrence columns; on an older one the lease alone decides).
 * The lease is held to expiry, never released on completion: it keeps two runs from overlapping.
 * A watched task also tells each claim when it runs next (`getNextRun()`), which the winner stores
 * as the job's next due time. A claim error rejects, which node-cron treats as "skip this fire".
 *
 * The task body runs outside the lease (node-cron calls it after `shouldRun`), so it has no
 * `ctx.renew()`; use `withCronLease` in a plain callback when a tick needs one.
 *
 * Each run is recorded in the lease row when it completes: `ok` or `error` for a task passed to
 * `watch`, with no outcome otherwise (node-cron does not tell a coordinator whether the task threw).
 *
 * @example
 * import cron from 'node-cron'
 * import { LEASE, leaseCoordinator } from 'pg-cron-lease'
 *
 * const coordinator = leaseCoordinator(pool)
 * const task = cron.schedule('* * * * *', sendReport, {
 *   name: 'report',
 *   distributed: true,
 *   distributedLease: LEASE.EVERY_MINUTE,
 *   runCoordinator: coordinator,
 * })
 * coordinator.watch(task)
 */
export function leaseCoordinator(db: Queryable, opts?: LeaseCoordinatorOptions): LeaseCoordinator {
  checkQueryable(db)
  const {
    leaseMs: leaseOption,
    table,
    holder,
    logger,
    prepare,
    record,
    clockToleranceMs,
    catchUp,
  } = compileOptions('leaseCoordinator', opts)
  const fixedMs = typeof leaseOption === 'number' ? leaseOption : undefined
  const leaseFor = typeof leaseOption === 'function' ? leaseOption : undefined
  // Runs this process won and has not completed, by node-cron's key (one run per key).
  const running = new Map<string, { ticket: Ticket; startedAt: number; failed?: unknown[] }>()
  // Tasks whose failures this coordinator hears: only their runs can be known to have succeeded.
  // Kept by name, so that a claim can ask the task when it runs next.
  const watched = new Map<string, WatchedTask>()
  // The slot of each task's previous claim: the gap to this one, when no watched task says it.
  const lastSlot = new Map<string, number>()
  // Catch-up runs in flight, by task name: node-cron names an executed run by when it started.
  const catchingUp = new Map<string, { failed?: unknown[] }>()

  const slotFor = (jobName: string, occurrence: number): Slot => {
    const task = watched.get(jobName)
    let next: number | null = null
    try {
      const at = typeof task?.getNextRun === 'function' ? task.getNextRun() : null
      if (at instanceof Date && Number.isFinite(at.getTime())) next = at.getTime()
    } catch {
      // A task that cannot say is a task whose next run is unknown.
    }
    const previous = lastSlot.get(jobName)
    if (lastSlot.size >= 1000) lastSlot.clear()
    lastSlot.set(jobName, occurrence)
    const gap =
      next !== null && next > occurrence
        ? next - occurrence
        : previous !== undefined && occurrence > previous
          ? occurrence - previous
          : null
    return { occurrence, nextOccurrence: next, intervalMs: gap }
  }

  const coordinator: LeaseCoordinator = {
    async shouldRun(key: string, ttlMs: number): Promise<boolean> {
      const { name, occurrence } = coordinatorKeySlot(key)
      const jobName = checkJobName(name, 'the task name in key')
      const leaseMs =
        fixedMs ??
        (leaseFor
          ? checkMs(leaseFor(jobName), `opts.leaseMs('${jobName}')`)
          : checkMs(ttlMs, 'ttlMs (distributedLease)'))
      const config = { db, table, jobName, leaseMs, holder, logger, prepare, clockToleranceMs }
      const ticket = await claim(config, slotFor(jobName, occurrence))
      if (ticket !== null && record) running.set(key, { ticket, startedAt: monotonicMs() })
      return ticket !== null
    },
    // Releasing here would let a replica whose timer fires late run the same occurrence again.
    async onComplete(key: string): Promise<void> {
      const run = running.get(key)
      if (!run) return
      running.delete(key)
      const durationMs = monotonicMs() - run.startedAt
      const { jobName } = run.ticket.config
      // node-cron emits execution:failed before it calls onComplete, so a watched task's run that
      // reached here without a failure finished; an unwatched one may have thrown unheard.
      const settled: Settled = run.failed
        ? { outcome: 'error', error: run.failed[0] }
        : watched.has(jobName)
          ? { outcome: 'ok' }
          : { outcome: 'unknown' }
      await recordOutcome(run.ticket, durationMs, run.ticket.intervalMs ?? undefined, settled)
    },
    watch(task) {
      const rule = 'a node-cron task (what cron.schedule returns: a name and an on(event, listener) method)'
      let name: unknown
      let on: unknown
      try {
        name = task.name
        on = task.on
      } catch {
        fail('task', rule, task)
      }
      if (typeof on !== 'function') fail('task', rule, task)
      const jobName = checkJobName(name, 'task.name')
      watched.set(jobName, task)
      task.on('execution:failed', coordinator.onExecutionFailed)
      if (catchUp !== undefined && typeof task.execute === 'function') {
        void catchUpTask(jobName, task, catchUp.withinMs).catch((error: unknown) =>
          warn(logger, `pg-cron-lease: could not catch up '${jobName}': ${describeError(error)}`),
        )
      }
      return task
    },
    onExecutionFailed(context): void {
      const name = context?.task?.name
      const error = context?.execution?.error
      const slot = context?.date
      // The slot names the very run: a task.execute() failing beside a scheduled run of the same
      // task never went through the coordinator, and must not mark that run. A context without a
      // date (built by hand) marks every run of the task in flight.
      if (slot instanceof Date && !Number.isNaN(slot.getTime())) {
        const run = running.get(`${String(name)}:${slot.toISOString()}`)
        if (run) run.failed = [error]
        else {
          const catching = catchingUp.get(String(name))
          if (catching) catching.failed = [error]
        }
        return
      }
      for (const run of running.values()) {
        if (run.ticket.config.jobName === name) run.failed = [error]
      }
    },
  }
  /**
   * The catch-up of a watched task: claimed as `catchUp` claims, run by `task.execute()` (which
   * node-cron runs without asking the coordinator), and recorded like any other run.
   */
  async function catchUpTask(jobName: string, task: WatchedTask, withinMs: number): Promise<void> {
    const leaseMs = fixedMs ?? (leaseFor ? checkMs(leaseFor(jobName), `opts.leaseMs('${jobName}')`) : DEFAULT_TTL_MS)
    const config = { db, table, jobName, leaseMs, holder, logger, prepare, clockToleranceMs }
    let next: number | null = null
    try {
      const at = typeof task.getNextRun === 'function' ? task.getNextRun() : null
      if (at instanceof Date && Number.isFinite(at.getTime())) next = at.getTime()
    } catch {
      // Unknown: the database takes one interval after the occurrence made up for.
    }
    const ticket = await claimCatchUp(config, withinMs, { occurrence: null, nextOccurrence: next, intervalMs: null })
    if (ticket === null) return
    const catching: { failed?: unknown[] } = {}
    catchingUp.set(jobName, catching)
    const startedAt = monotonicMs()
    try {
      await (task.execute as () => Promise<unknown>).call(task)
    } catch (error) {
      // node-cron's execute() rejects when the task throws: that is the run failing, not the catch-up.
      catching.failed ??= [error]
    } finally {
      catchingUp.delete(jobName)
    }
    const settled: Settled = catching.failed ? { outcome: 'error', error: catching.failed[0] } : { outcome: 'ok' }
    if (record) await recordOutcome(ticket, monotonicMs() - startedAt, ticket.intervalMs ?? undefined, settled)
  }

  return Object.freeze(coordinator)
}

/** node-cron's `distributedLease` when a task sets none: what a catch-up claims for without one. */
const DEFAULT_TTL_MS = 30_000
