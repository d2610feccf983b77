import { formatValue } from './format-value.js'

/**
 * The longest lease accepted, in ms: 2^31 - 1, about 24.8 days. It is the largest value the
 * statement's `integer` parameter holds and the longest delay a Node timer can wait, and it still
 * covers a monthly job's 80% lease.
 *
 * @example
 * leaseMs <= MAX_LEASE_MS // true for every lease the library accepts
 */
export const MAX_LEASE_MS = 2_147_483_647

// The interval each lease made by leaseForInterval came from, so the caller need not declare it
// again as `everyMs`. A lease two different intervals round to is ambiguous (null), and the map is
// bounded: past that, intervals are observed by the table instead.
const intervals = new Map<number, number | null>()
const REMEMBERED_INTERVALS = 1000

/**
 * Lease lengths for common schedules, in milliseconds. Each is a little under the interval
 * (about 80%): long enough that a replica whose timer fires late, or whose clock is off, still
 * finds the occurrence taken; short enough that the lease has expired by the next occurrence.
 *
 * @example
 * cron.schedule('* * * * *', () => withCronLease(pool, 'report', LEASE.EVERY_MINUTE, sendReport))
 */
export const LEASE: Readonly<{
  EVERY_MINUTE: number
  EVERY_5_MIN: number
  EVERY_10_MIN: number
  HOURLY: number
  DAILY: number
}> = Object.freeze({
  EVERY_MINUTE: 50 * 1000,
  EVERY_5_MIN: 4 * 60 * 1000,
  EVERY_10_MIN: 8 * 60 * 1000,
  HOURLY: 50 * 60 * 1000,
  DAILY: 20 * 60 * 60 * 1000,
})

/**
 * The lease for any fixed interval: 80% of it, in whole milliseconds (at least 1). Use it when the
 * schedule is not one of the {@link LEASE} presets, e.g. every 15 seconds or every 2 hours.
 *
 * @example
 * setInterval(leasedTick(pool, 'sync', leaseForInterval(15_000), sync), 15_000)
 */
export function leaseForInterval(intervalMs: number): number {
  if (typeof intervalMs !== 'number' || !Number.isFinite(intervalMs) || intervalMs <= 0) {
    throw new TypeError(
      `pg-cron-lease: intervalMs must be a positive finite number of milliseconds, got ${formatValue(intervalMs)}`,
    )
  }
  const leaseMs = Math.max(1, Math.round(intervalMs * 0.8))
  if (leaseMs > MAX_LEASE_MS) {
    throw new TypeError(
      `pg-cron-lease: intervalMs is too long: its lease would exceed ${MAX_LEASE_MS} ms (about 24.8 days), got ${formatValue(intervalMs)}`,
    )
  }
  const known = intervals.get(leaseMs)
  if (known === undefined && intervals.size < REMEMBERED_INTERVALS) intervals.set(leaseMs, intervalMs)
  else if (known !== undefined && known !== intervalMs) intervals.set(leaseMs, null)
  return leaseMs
}

/** The interval `leaseForInterval` was given for this lease in this process, if exactly one was. */
export function intervalOfLease(leaseMs: number): number | undefined {
  return intervals.get(leaseMs) ?? undefined
}
