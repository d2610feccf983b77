/**
 * What @nestjs/schedule declared for a method (the metadata its decorators set), and the lease that
 * follows from it. The slot of a `@Cron` fire is read by `cronJobSlot`
 * (src/scheduler-slot.ts), the one place that reads a fire's slot from the `cron` package's job.
 */
import { SchedulerType } from '@nestjs/schedule/dist/enums/scheduler-type.enum.js'
import {
  SCHEDULE_CRON_OPTIONS,
  SCHEDULE_INTERVAL_OPTIONS,
  SCHEDULE_TIMEOUT_OPTIONS,
  SCHEDULER_NAME,
  SCHEDULER_TYPE,
} from '@nestjs/schedule/dist/schedule.constants.js'
import { leaseForInterval, MAX_LEASE_MS } from '../presets.js'
import type { CronPackageJob } from '../scheduler-slot.js'

/** A method's schedule, as its @nestjs/schedule decorator declared it. */
export type Schedule =
  | { readonly kind: 'cron'; readonly name: string | undefined; readonly options: CronMetadata }
  | { readonly kind: 'interval'; readonly name: string | undefined; readonly ms: number }
  | { readonly kind: 'timeout'; readonly name: string | undefined; readonly ms: number }

/** The object `@Cron(cronTime, options)` stores: its options, with `cronTime`. */
export interface CronMetadata {
  cronTime: unknown
  name?: string
  timeZone?: string
  utcOffset?: number
}

/** A `@Timeout` names no schedule to size a lease from: replicas started within a minute run it once. */
export const TIMEOUT_LEASE_MS = 60_000

/** How many of a cron expression's fires the shortest gap is looked for among. */
export const GAP_FIRES = 64

/** The schedule @nestjs/schedule's decorators declared on `fn`, or null when there is none. */
export function scheduleOf(fn: object): Schedule | null {
  const type = Reflect.getMetadata(SCHEDULER_TYPE, fn) as SchedulerType | undefined
  const name = Reflect.getMetadata(SCHEDULER_NAME, fn) as string | undefined
  switch (type) {
    case SchedulerType.CRON: {
      // Cron's name lives in its options too: the one the module gives an unnamed job is set there.
      const options = Reflect.getMetadata(SCHEDULE_CRON_OPTIONS, fn) as CronMetadata
      return { kind: 'cron', name: options?.name ?? name, options }
    }
    case SchedulerType.INTERVAL:
      return { kind: 'interval', name, ms: Number(Reflect.getMetadata(SCHEDULE_INTERVAL_OPTIONS, fn)?.timeout) }
    case SchedulerType.TIMEOUT:
      return { kind: 'timeout', name, ms: Number(Reflect.getMetadata(SCHEDULE_TIMEOUT_OPTIONS, fn)?.timeout) }
    default:
      return null
  }
}

/**
 * The lease for a cron job: 80% of the shortest gap between its next {@link GAP_FIRES} fires, as
 * the job's own `CronTime` lists them in its zone (so a DST change among them counts), at most
 * `MAX_LEASE_MS`. The rule of the presets: long enough that a late fire of the same occurrence
 * finds it taken even without occurrence keys, short enough to end before the next one. Why only
 * 64 fires: the `cron` package takes about a millisecond a fire, and the 20% left over absorbs an
 * hour's DST shift for any gap of five hours or more. Null for a job that fires once (a Date).
 * `from` (a date of the job's, in its zone) is where the fires are listed from; default its next.
 */
export function cronLeaseMs(
  job: CronPackageJob,
  from: ReturnType<CronPackageJob['nextDate']> = job.nextDate(),
): number | null {
  let at = from
  let previous = at.toMillis()
  let shortest = Number.POSITIVE_INFINITY
  for (let i = 0; i < GAP_FIRES; i++) {
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
