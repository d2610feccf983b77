/** What @nestjs/schedule declared for a method, and the lease that follows from it. */
import { leaseForInterval, MAX_LEASE_MS } from '../presets.js'
import type { CronPackageJob, LuxonLike } from '../scheduler-slot.js'

// By value: @nestjs/schedule's root exports none, and its `exports` map (12 on) admits no `dist/` path.
export const SCHEDULE_METADATA = Object.freeze({
  type: 'SCHEDULER_TYPE',
  name: 'SCHEDULER_NAME',
  cron: 'SCHEDULE_CRON_OPTIONS',
  interval: 'SCHEDULE_INTERVAL_OPTIONS',
  timeout: 'SCHEDULE_TIMEOUT_OPTIONS',
})
export type Schedule =
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
