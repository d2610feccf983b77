/**
 * Finds the `@Leased()` methods when the application starts, runs each fire through the core, and
 * on shutdown waits for ticks in flight. Its module is not global, so @nestjs/schedule's hooks run
 * first on the way up (jobs exist at bootstrap) and last on the way down (before pools end).
 */
import { performance } from 'node:perf_hooks'
import { Inject, Injectable, Optional } from '@nestjs/common'
import { DiscoveryService, MetadataScanner } from '@nestjs/core'
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js'
import { SchedulerRegistry } from '@nestjs/schedule'
import { catchUp } from '../catch-up.js'
import { withCronLease } from '../lease.js'
import { forInterval, type IntervalLease } from '../presets.js'
import { type CronPackageJob, cronJobSlot, type NamedSlot, NO_SLOT } from '../scheduler-slot.js'
import type { LeaseContext, LeaseOptions } from '../types.js'
import { bindInstance, type FireLeased, type LeasedMethod, leasedMethod, unbindInstance } from './leased.js'
import { type ModuleConfig, PG_CRON_LEASE_CONFIG } from './options.js'
import { cronLeaseMs, type Schedule, scheduleOf, TIMEOUT_LEASE_MS } from './schedule-lease.js'

interface LeasedJob {
  readonly name: string
  readonly method: LeasedMethod
  readonly schedule: Schedule
  readonly instance: object
  /** For a `@Cron` without `leaseMs`, found from its job at the first need. */
  lease: number | IntervalLease | undefined
  readonly everyMs: number | undefined
}

const where = (method: LeasedMethod) => `${method.className}.${method.methodName}`

// Less the trailing `undefined`s (cron passes its unset onComplete).
function given(args: unknown[]): unknown[] {
  let end = args.length
  while (end > 0 && args[end - 1] === undefined) end--
  return args.slice(0, end)
}

export class PgCronLeaseRunner {
  private readonly jobs = new Map<LeasedMethod, LeasedJob>()
  private readonly inFlight = new Map<Promise<unknown>, string>()
  private readonly instances = new Set<object>()
  private closing = false
  private drained: Promise<void> | undefined
  private readonly fire: FireLeased = (method, instance, args) => this.run(method, instance, args)

  constructor(
    private readonly config: ModuleConfig,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly registry: SchedulerRegistry | null,
  ) {
    this.nameCronJobs()
  }

  private wrappers(): InstanceWrapper[] {
    return [...this.discovery.getControllers(), ...this.discovery.getProviders()]
  }

  // Unnamed, @nestjs/schedule would register a leased `@Cron` under a random UUID, and the fire
  // could not find its job. Named on the class, so every application in the process agrees.
  private nameCronJobs(): void {
    for (const wrapper of this.wrappers()) {
      const prototype = (wrapper.metatype as { prototype?: unknown } | null)?.prototype
      if (typeof prototype !== 'object' || prototype === null) continue
      for (const key of this.scanner.getAllMethodNames(prototype)) {
        const fn = (prototype as Record<string, unknown>)[key]
        const method = leasedMethod(fn)
        const schedule = method && scheduleOf(fn as object)
        if (method && schedule?.kind === 'cron' && schedule.options && schedule.name === undefined) {
          schedule.options.name = where(method)
        }
      }
    }
  }

  onModuleInit(): void {
    const names = new Map<string, LeasedMethod>()
    for (const wrapper of this.wrappers()) {
      const instance = wrapper.instance as Record<string, unknown> | null | undefined
      if (typeof instance !== 'object' || instance === null || !Object.getPrototypeOf(instance)) continue
      if (!wrapper.isDependencyTreeStatic()) continue // @nestjs/schedule schedules none of these either
      for (const key of this.scanner.getAllMethodNames(Object.getPrototypeOf(instance))) {
        const fn = instance[key]
        const method = leasedMethod(fn)
        if (method === undefined) continue
        const job = this.leasedJob(method, scheduleOf(fn as object), instance)
        const other = names.get(job.name)
        if (other !== undefined) {
          throw new Error(
            `pg-cron-lease: ${where(other)} and ${where(method)} are both leased as job ${JSON.stringify(job.name)}: ` +
              'give their schedules different names',
          )
        }
        names.set(job.name, method)
        this.jobs.set(method, job)
        this.instances.add(instance)
      }
    }
    for (const instance of this.instances) bindInstance(instance, this.fire)
  }

  private leasedJob(method: LeasedMethod, schedule: Schedule | null, instance: object): LeasedJob {
    if (schedule === null) {
      throw new Error(
        `pg-cron-lease: ${where(method)} has @Leased() but no @Cron, @Interval or @Timeout, so nothing would ever ` +
          'call it: add the schedule decorator beside @Leased(), or remove @Leased()',
      )
    }
    const { leaseMs, catchUp: window } = method.options
    if (schedule.kind === 'cron') {
      if (this.registry === null) {
        throw new Error(
          `pg-cron-lease: ${where(method)} is a leased @Cron, but the application has no SchedulerRegistry: import ScheduleModule.forRoot()`,
        )
      }
      if (schedule.name === undefined) {
        throw new Error(
          `pg-cron-lease: ${where(method)} is a leased @Cron without a name, on a provider made by a factory or a value: ` +
            "give it one, @Cron(expression, { name: '…' })",
        )
      }
      if (leaseMs === undefined && typeof schedule.options.cronTime !== 'string') {
        throw new Error(
          `pg-cron-lease: ${where(method)} fires at a fixed date, which has no gap to size a lease from: give @Leased({ leaseMs })`,
        )
      }
      return { name: schedule.name, method, schedule, instance, lease: leaseMs, everyMs: undefined }
    }
    if (!(schedule.ms >= 0)) {
      throw new Error(`pg-cron-lease: ${where(method)} has a @${schedule.kind} without a number of ms`)
    }
    const name = schedule.name ?? where(method)
    if (schedule.kind === 'timeout') {
      if (window !== undefined) {
        throw new Error(
          `pg-cron-lease: ${where(method)} is a @Timeout, which never falls due again, so it has nothing to catch up: remove catchUp`,
        )
      }
      return { name, method, schedule, instance, lease: leaseMs ?? TIMEOUT_LEASE_MS, everyMs: undefined }
    }
    const everyMs = Math.max(1, Math.round(schedule.ms))
    return { name, method, schedule, instance, lease: leaseMs ?? forInterval(schedule.ms), everyMs }
  }

  onApplicationBootstrap(): void {
    for (const job of this.jobs.values()) {
      if (job.method.options.catchUp !== undefined) this.track(job.name, this.catchUp(job))
    }
  }

  onModuleDestroy(): void {
    this.closing = true
  }

  beforeApplicationShutdown(): Promise<void> {
    this.closing = true
    this.drained ??= this.drain()
    return this.drained
  }

  async onApplicationShutdown(): Promise<void> {
    await this.beforeApplicationShutdown()
    for (const instance of this.instances) unbindInstance(instance, this.fire)
  }

  private cronJob(job: LeasedJob): CronPackageJob | undefined {
    if (this.registry?.doesExist('cron', job.name) !== true) return undefined
    return this.registry.getCronJob(job.name) as unknown as CronPackageJob
  }

  private leaseOf(job: LeasedJob, cronJob: CronPackageJob | undefined): number | IntervalLease {
    if (cronJob !== undefined && job.lease === undefined) {
      const derived = cronLeaseMs(cronJob)
      if (derived === null)
        throw new Error(`cannot size a lease from the schedule of ${where(job.method)}: give leaseMs`)
      job.lease = derived
    }
    return job.lease as number | IntervalLease
  }

  private claimOptions(job: LeasedJob, slot: NamedSlot): LeaseOptions {
    const { occurrence, nextOccurrence } = slot
    return {
      ...this.config.defaults,
      logger: this.config.leaseLogger,
      ...(job.everyMs !== undefined && typeof job.lease === 'number' ? { everyMs: job.everyMs } : {}),
      ...(occurrence === null ? {} : { occurrence: new Date(occurrence) }),
      ...(nextOccurrence === null ? {} : { nextOccurrence: new Date(nextOccurrence) }),
    }
  }

  private tick(job: LeasedJob, args: unknown[]): (ctx: LeaseContext) => unknown {
    const passed = given(args)
    return (ctx) => job.method.original.apply(job.instance, [...passed, ctx])
  }

  /** One fire: never rejects; resolves to the body's result where it ran. */
  private run(method: LeasedMethod, instance: object, args: unknown[]): Promise<unknown> {
    const job = this.jobs.get(method)
    if (job === undefined || job.instance !== instance) {
      this.config.logger.error(`${where(method)} fired on an instance this application did not start: not run`)
      return Promise.resolve(undefined)
    }
    if (this.closing) {
      this.config.logger.debug?.(`${job.name}: fired while the application shuts down: not claimed`)
      return Promise.resolve(undefined)
    }
    // Read in the fire's own turn: the job's lastDate() moves on with its next fire.
    const cronJob = job.schedule.kind === 'cron' ? this.cronJob(job) : undefined
    const slot = cronJob === undefined ? NO_SLOT : cronJobSlot(cronJob)
    return this.track(job.name, this.claim(job, args, cronJob, slot))
  }

  private claim(job: LeasedJob, args: unknown[], found: CronPackageJob | undefined, slot: NamedSlot): Promise<unknown> {
    return this.settle(job, async () => {
      let cronJob = found
      if (job.schedule.kind === 'cron' && cronJob === undefined) {
        // A fire already late at construction runs before registration; a microtask later it is there.
        await null
        cronJob = this.cronJob(job)
        if (cronJob === undefined)
          throw new Error(`no cron job named ${JSON.stringify(job.name)} in the SchedulerRegistry`)
        slot = cronJobSlot(cronJob)
      }
      const lease = this.leaseOf(job, cronJob)
      return withCronLease(this.config.db, job.name, lease, this.tick(job, args), this.claimOptions(job, slot))
    })
  }

  private catchUp(job: LeasedJob): Promise<unknown> {
    return this.settle(job, async () => {
      const cronJob = job.schedule.kind === 'cron' ? this.cronJob(job) : undefined
      if (job.schedule.kind === 'cron' && cronJob === undefined) {
        throw new Error(`cannot catch up: no cron job named ${JSON.stringify(job.name)} in the SchedulerRegistry`)
      }
      const lease = this.leaseOf(job, cronJob)
      const { nextOccurrence } = cronJob === undefined ? NO_SLOT : cronJobSlot(cronJob)
      return catchUp(this.config.db, job.name, lease, this.tick(job, []), {
        ...this.claimOptions(job, { occurrence: null, nextOccurrence }),
        withinMs: job.method.options.catchUp!.withinMs,
      })
    })
  }

  // Never rejects: a failed claim or body is logged under the job's name.
  private async settle(job: LeasedJob, tick: () => Promise<{ ran: boolean; result?: unknown }>): Promise<unknown> {
    try {
      const outcome = await tick()
      return outcome.ran ? outcome.result : undefined
    } catch (error) {
      this.config.leaseLogger.error?.(error, job.name)
      return undefined
    }
  }

  private track<T>(jobName: string, tick: Promise<T>): Promise<T> {
    this.inFlight.set(tick, jobName)
    const forget = () => this.inFlight.delete(tick)
    tick.then(forget, forget)
    return tick
  }

  /** Waits for the ticks in flight up to the timeout, then warns naming the jobs still running. */
  private async drain(): Promise<void> {
    const deadline = performance.now() + this.config.shutdownTimeoutMs
    while (this.inFlight.size > 0) {
      const left = deadline - performance.now()
      if (left <= 0) {
        const running = [...new Set(this.inFlight.values())].join(', ')
        this.config.logger.warn(
          `shutting down with ticks still running after ${this.config.shutdownTimeoutMs} ms (shutdownTimeoutMs): ${running}`,
        )
        return
      }
      let timer: NodeJS.Timeout | undefined
      const expired = new Promise((resolve) => {
        timer = setTimeout(resolve, left)
      })
      await Promise.race([Promise.allSettled(this.inFlight.keys()), expired])
      clearTimeout(timer)
    }
  }
}

// Declared without decorator syntax, so the library builds without `experimentalDecorators`.
Injectable()(PgCronLeaseRunner)
Inject(PG_CRON_LEASE_CONFIG)(PgCronLeaseRunner, undefined, 0)
Inject(DiscoveryService)(PgCronLeaseRunner, undefined, 1)
Inject(MetadataScanner)(PgCronLeaseRunner, undefined, 2)
Inject(SchedulerRegistry)(PgCronLeaseRunner, undefined, 3)
Optional()(PgCronLeaseRunner, undefined, 3)
