/** What @nestjs/schedule declared for a method, and the lease that follows from it. */
import { SchedulerType } from '@nestjs/schedule/dist/enums/scheduler-type.enum.js'
import {
  SCHEDULE_CRON_OPTIONS,
  SCHEDULE_INTERVAL_OPTIONS,
  SCHEDULE_TIMEOUT_OPTIONS,
  SCHEDULER_NAME,
  SCHEDULER_TYPE,
} from '@nestjs/schedule/dist/schedule.constants.js'
import { leaseForInterval, MAX_LEASE_MS } from '../presets.js'
import type { CronPackageJob, LuxonLike } from '../scheduler-slot.js'

export type Schedule =
  | { readonly kind: 'cron'; readonly name: string | undefined; readonly options: { cronTime: unknown; name?: string } }
  | { readonly kind: 'interval' | 'timeout'; readonly name: string | undefined; readonly ms: number }

/**
 * A `@Timeout`'s lease: replicas started within a minute run it once.
 *
 * @example
 * \@Timeout(5_000) \@Leased({ leaseMs: TIMEOUT_LEASE_MS * 5 }) warmUp() {}
 */
export const TIMEOUT_LEASE_MS = 60_000

export function scheduleOf(fn: object): Schedule | null {
  const type = Reflect.getMetadata(SCHEDULER_TYPE, fn) as SchedulerType | undefined
  const name = Reflect.getMetadata(SCHEDULER_NAME, fn) as string | undefined
  switch (type) {
    case SchedulerType.CRON: {
      // The name the module gives an unnamed job is set in its options.
      const options = Reflect.getMetadata(SCHEDULE_CRON_OPTIONS, fn)
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

// 80% of the shortest gap of the next 64 fires in the job's zone (DST counts), at most MAX_LEASE_MS; null for a
// one-off. 64, as each costs ~1 ms and 20% absorbs DST past 5 h.
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
