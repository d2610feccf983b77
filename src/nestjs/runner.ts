/** Runs each `@Leased()` fire through the core; its module is not global, so @nestjs/schedule's hooks run around it. */
import { Inject, Injectable, Optional } from '@nestjs/common'
import { DiscoveryService, MetadataScanner } from '@nestjs/core'
import { SchedulerRegistry } from '@nestjs/schedule'
import { drainGroup, runGroup } from '../drain.js'
import { runCatchUp, runConfig, runLease } from '../lease.js'
import { leaseForInterval, MAX_LEASE_MS } from '../presets.js'
import { type CronPackageJob, cronJobSlot, type LuxonLike, NO_SLOT } from '../scheduler-slot.js'
import type { LeaseContext } from '../types.js'
import { bindings, type FireLeased, type LeasedMethod, type LeasedOptions, leasedMethod } from './leased.js'
import { type ModuleConfig, PG_CRON_LEASE_CONFIG } from './options.js'

// By value: @nestjs/schedule's root exports none, and its `exports` map (12 on) admits no `dist/` path.
export const SCHEDULE_METADATA = Object.freeze({
  type: 'SCHEDULER_TYPE',
  name: 'SCHEDULER_NAME',
  cron: 'SCHEDULE_CRON_OPTIONS',
  interval: 'SCHEDULE_INTERVAL_OPTIONS',
  timeout: 'SCHEDULE_TIMEOUT_OPTIONS',
})
type Schedule =
  | { readonly kind: 'cron'; readonly name: string | undefined; readonly options: { cronTime: unknown; name?: string } }
  | { readonly kind: 'interval' | 'timeout'; readonly name: string | undefined; readonly ms: number }

/** A `@Timeout`'s lease: replicas started within a minute run it once. */
export const TIMEOUT_LEASE_MS = 60_000

// `SchedulerType`'s values under the `type` key.
const KINDS = { 1: 'cron', 2: 'timeout', 3: 'interval' } as const

export function scheduleOf(fn: object): Schedule | null {
  const kind: Schedule['kind'] | undefined = KINDS[Reflect.getMetadata(SCHEDULE_METADATA.type, fn) as 1 | 2 | 3]
  if (kind === undefined) return null
  const name = Reflect.getMetadata(SCHEDULE_METADATA.name, fn) as string | undefined
  const options = Reflect.getMetadata(SCHEDULE_METADATA[kind], fn)
  // The name the module gives an unnamed job is set in its options.
  if (kind === 'cron') return { kind, name: options?.name ?? name, options }
  return { kind, name, ms: Number(options?.timeout) }
}

// 80% of the shortest of the next 64 gaps in the job's zone (each costs ~1 ms; 20% absorbs DST); null for a one-off.
export function cronLeaseMs(job: CronPackageJob, from: LuxonLike = job.nextDate()): number | null {
  let at = from
  let previous = at.toMillis()
  let shortest = Number.POSITIVE_INFINITY
  for (let i = 0; i < 64; i++) {
    try {
      at = job.cronTime.getNextDateFrom(at)
    } catch {
      break // the cron package gives up past eight years: the gaps found so far are all there are
    }
    const ms = at.toMillis()
    if (!(ms > previous)) break
    shortest = Math.min(shortest, ms - previous)
    previous = ms
  }
  if (!Number.isFinite(shortest)) return null
  return shortest * 0.8 >= MAX_LEASE_MS ? MAX_LEASE_MS : leaseForInterval(shortest)
}

interface LeasedJob {
  readonly name: string
  readonly method: LeasedMethod
  readonly schedule: Schedule
  readonly instance: object
  /** For a `@Cron` without `leaseMs`, found from its job at the first need. */
  leaseMs: number | undefined
}

// Why a leased method cannot run as declared: each follows the method's name in a start-up error.
const MISTAKES = {
  unscheduled:
    'has @Leased() but no @Cron, @Interval or @Timeout, so nothing would ever call it: ' +
    'add the schedule decorator beside @Leased(), or remove @Leased()',
  noRegistry: 'is a leased @Cron, but the application has no SchedulerRegistry: import ScheduleModule.forRoot()',
  unnamedCron:
    'is a leased @Cron without a name, on a provider made by a factory or a value: ' +
    "give it one, @Cron(expression, { name: '…' })",
  fixedDate: 'fires at a fixed date, which has no gap to size a lease from: give @Leased({ leaseMs })',
  timeoutCatchUp: 'is a @Timeout, which never falls due again, so it has nothing to catch up: remove catchUp',
}

const startError = (method: LeasedMethod, mistake: string) => new Error(`pg-cron-lease: ${method.label} ${mistake}`)

export class PgCronLeaseRunner {
  private readonly jobs = new Map<LeasedMethod, LeasedJob>()
  // This application's runs: its shutdown drains them as drainLeases drains the process's.
  private readonly runs = runGroup()
  private closing = false
  private drained: Promise<void> | undefined
  private readonly fire: FireLeased = async (method, instance, args) => {
    const job = this.jobs.get(method)
    if (job === undefined || job.instance !== instance)
      this.config.logger.error(`${method.label} fired on an instance this application did not start: not run`)
    else if (this.closing)
      this.config.logger.debug?.(`${job.name}: fired while the application shuts down: not claimed`)
    else return this.run(job, args)
  }

  constructor(
    private readonly config: ModuleConfig,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly registry: SchedulerRegistry | undefined,
  ) {
    // Unnamed, a `@Cron` is registered under a random UUID the fire cannot find: named on the class, all apps agree.
    for (const wrapper of this.wrappers()) {
      const prototype = (wrapper.metatype as { prototype?: unknown } | null)?.prototype
      if (typeof prototype !== 'object' || prototype === null) continue
      for (const [method, schedule] of this.leasedMethods(prototype, prototype)) {
        if (schedule?.kind === 'cron' && schedule.options && schedule.name === undefined)
          schedule.options.name = method.label
      }
    }
  }

  private readonly wrappers = () => [...this.discovery.getControllers(), ...this.discovery.getProviders()]

  private *leasedMethods(target: object, prototype: object): Generator<[LeasedMethod, Schedule | null]> {
    for (const key of this.scanner.getAllMethodNames(prototype)) {
      const fn = (target as Record<string, unknown>)[key]
      const method = leasedMethod(fn)
      if (method !== undefined) yield [method, scheduleOf(fn as object)]
    }
  }

  onModuleInit(): void {
    for (const wrapper of this.wrappers()) {
      const instance = wrapper.instance as object | null | undefined
      if (typeof instance !== 'object' || instance === null || !Object.getPrototypeOf(instance)) continue
      if (!wrapper.isDependencyTreeStatic()) continue // @nestjs/schedule schedules none of these either
      for (const [method, schedule] of this.leasedMethods(instance, Object.getPrototypeOf(instance))) {
        const job = this.leasedJob(method, schedule, instance)
        const other = [...this.jobs.values()].find(({ name }) => name === job.name)
        if (other !== undefined) {
          const clash = `and ${method.label} are both leased as job ${JSON.stringify(job.name)}`
          throw startError(other.method, `${clash}: give their schedules different names`)
        }
        this.jobs.set(method, job)
      }
    }
    for (const { instance } of this.jobs.values()) bindings.set(instance, this.fire)
  }

  private leasedJob(method: LeasedMethod, schedule: Schedule | null, instance: object): LeasedJob {
    if (schedule === null) throw startError(method, MISTAKES.unscheduled)
    const { leaseMs, catchUp } = method.options
    const job = { name: schedule.name ?? method.label, method, schedule, instance, leaseMs }
    if (schedule.kind === 'cron') {
      if (this.registry === undefined) throw startError(method, MISTAKES.noRegistry)
      if (schedule.name === undefined) throw startError(method, MISTAKES.unnamedCron)
      const gapless = typeof schedule.options.cronTime !== 'string'
      if (leaseMs === undefined && gapless) throw startError(method, MISTAKES.fixedDate)
      return job
    }
    if (!(schedule.ms >= 0)) throw startError(method, `has a @${schedule.kind} without a number of ms`)
    if (schedule.kind === 'interval') return { ...job, leaseMs: leaseMs ?? leaseForInterval(schedule.ms) }
    if (catchUp !== undefined) throw startError(method, MISTAKES.timeoutCatchUp)
    return { ...job, leaseMs: leaseMs ?? TIMEOUT_LEASE_MS }
  }

  onApplicationBootstrap(): void {
    for (const job of this.jobs.values())
      if (job.method.options.catchUp !== undefined) void this.run(job, [], job.method.options.catchUp)
  }

  onModuleDestroy(): void {
    this.closing = true
  }

  // drainLeases' path for this application's runs: a tick past shutdownTimeoutMs is aborted, never left running.
  beforeApplicationShutdown(): Promise<void> {
    this.closing = true
    const ms = this.config.shutdownTimeoutMs
    const aborted = `shutting down: ticks still running after ${ms} ms (shutdownTimeoutMs) were aborted and recorded as errors`
    this.drained ??= drainGroup(this.runs, ms, `shutdownTimeoutMs (${ms} ms)`).then((stopped) => {
      if (stopped.length > 0) this.config.logger.warn(`${aborted}: ${stopped.join(', ')}`)
    })
    return this.drained
  }

  async onApplicationShutdown(): Promise<void> {
    await this.beforeApplicationShutdown()
    for (const { instance } of this.jobs.values()) if (bindings.get(instance) === this.fire) bindings.delete(instance)
  }

  private cronJob(job: LeasedJob): CronPackageJob | undefined {
    if (job.schedule.kind !== 'cron' || this.registry?.doesExist('cron', job.name) !== true) return undefined
    return this.registry.getCronJob(job.name) as unknown as CronPackageJob
  }

  // A fire, or the catch-up at bootstrap. Never rejects: a failed claim or method is logged under the job's name.
  private async run(job: LeasedJob, args: unknown[], catchUp?: LeasedOptions['catchUp']): Promise<unknown> {
    const { schedule, method, instance } = job
    try {
      // Read in the fire's own turn: the job's lastDate() moves on with its next fire.
      let cronJob = this.cronJob(job)
      if (schedule.kind === 'cron' && cronJob === undefined) {
        // A fire already late at construction runs before registration; a microtask later it is there.
        await null
        cronJob = this.cronJob(job)
        const during = catchUp ? 'cannot catch up: ' : ''
        if (cronJob === undefined)
          throw new Error(`${during}no cron job named ${JSON.stringify(job.name)} in the SchedulerRegistry`)
      }
      const slot = cronJob === undefined ? NO_SLOT : cronJobSlot(cronJob)
      if (cronJob !== undefined) job.leaseMs ??= cronLeaseMs(cronJob) ?? undefined
      if (job.leaseMs === undefined)
        throw new Error(`cannot size a lease from the schedule of ${method.label}: give leaseMs`)
      // Less the trailing `undefined`s (cron passes its unset onComplete).
      const passed = args.slice(0, args.findLastIndex((arg) => arg !== undefined) + 1)
      const tick = (ctx: LeaseContext) => method.original.apply(instance, [...passed, ctx])
      const opts = {
        ...this.config.defaults,
        logger: this.config.leaseLogger,
        ...(schedule.kind === 'interval' && { everyMs: Math.max(1, Math.round(schedule.ms)) }),
        ...(slot.occurrence !== null && !catchUp && { occurrence: new Date(slot.occurrence) }),
        ...(slot.nextOccurrence !== null && { nextOccurrence: new Date(slot.nextOccurrence) }),
        ...catchUp,
      }
      const config = runConfig(catchUp ? 'catchUp' : 'withCronLease', this.config.db, job.name, job.leaseMs, tick, opts)
      const outcome = await (catchUp ? runCatchUp(config, this.runs) : runLease(config, config.slot, this.runs))
      return outcome.ran ? outcome.result : undefined
    } catch (error) {
      this.config.leaseLogger.error?.(error, job.name)
    }
  }
}

// Declared without decorator syntax, so the library builds without `experimentalDecorators`.
Injectable()(PgCronLeaseRunner)
for (const [i, token] of [PG_CRON_LEASE_CONFIG, DiscoveryService, MetadataScanner, SchedulerRegistry].entries())
  Inject(token)(PgCronLeaseRunner, undefined, i)
Optional()(PgCronLeaseRunner, undefined, 3)
