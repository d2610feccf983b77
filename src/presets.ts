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

/**
 * The longest interval a job may declare (`everyMs`), in ms: ten years of 365.25 days. The next
 * due time is stored from it, and every time the library stores must read back as a `Date`.
 *
 * @example
 * withCronLease(pool, 'decennial', LEASE.DAILY, run, { everyMs: MAX_INTERVAL_MS }) // the longest accepted
 */
export const MAX_INTERVAL_MS = 315_576_000_000

/**
 * Lease lengths for common schedules, in milliseconds. Each is a little under the interval
 * (about 80%): long enough that a replica whose timer fires late, or whose clock is off, still
 * finds the occurrence taken; short enough that the lease has expired by the next occurrence.
 * That is the rule while claims name no occurrence. A claim that names its occurrence is kept
 * from re-running it by the occurrence itself, so its lease only has to outlast the run (or be
 * kept alive) and stay shorter than the gap to the next fire; these lengths still satisfy that
 * for any run shorter than them.
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
 * schedule is not one of the {@link LEASE} presets, e.g. every 15 seconds or every 2 hours. It
 * returns the lease alone; {@link forInterval} also declares the interval, for overdue detection
 * and missed counting.
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
  return leaseMs
}

/**
 * A lease and the interval it is for, as {@link forInterval} returns them: pass it where a lease
 * length goes (`withCronLease`, `leasedTick`), and the interval is declared as `everyMs` with it.
 */
export interface IntervalLease {
  /** The lease: {@link leaseForInterval} of the interval. */
  readonly leaseMs: number
  /** The interval, declared as the job's `everyMs`. */
  readonly everyMs: number
}

/**
 * The lease for a fixed interval together with the interval itself, so that one value declares
 * both: the job is then reported overdue once its next run is late, and its missed runs are
 * counted, without writing the interval twice.
 *
 * @example
 * setInterval(leasedTick(pool, 'sync', forInterval(15_000), sync), 15_000)
 * // the same as leasedTick(pool, 'sync', leaseForInterval(15_000), sync, { everyMs: 15_000 })
 */
export function forInterval(intervalMs: number): IntervalLease {
  const leaseMs = leaseForInterval(intervalMs)
  return Object.freeze({ leaseMs, everyMs: Math.max(1, Math.round(intervalMs)) })
}
