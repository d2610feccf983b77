import { fail, MAX_LEASE_MS } from './validate.js'

export { MAX_LEASE_MS }

/** The longest `everyMs`, in ms: ten years, so every stored due time reads back as a `Date`. */
export const MAX_INTERVAL_MS = 315_576_000_000

/** Lease lengths for common schedules, in ms: about 80% of the interval, so a late fire still finds it taken. */
export const LEASE = Object.freeze({
  EVERY_MINUTE: 50 * 1000,
  EVERY_5_MIN: 4 * 60 * 1000,
  EVERY_10_MIN: 8 * 60 * 1000,
  HOURLY: 50 * 60 * 1000,
  DAILY: 20 * 60 * 60 * 1000,
})

/**
 * The lease for any fixed interval: 80% of it, in whole ms (at least 1). {@link forInterval} adds the interval.
 * @example
 * setInterval(leasedTick(pool, 'sync', leaseForInterval(15_000), sync), 15_000)
 */
export function leaseForInterval(intervalMs: number): number {
  if (typeof intervalMs !== 'number' || !Number.isFinite(intervalMs) || intervalMs <= 0)
    fail('intervalMs', 'a positive finite number of milliseconds', intervalMs)
  const leaseMs = Math.max(1, Math.round(intervalMs * 0.8))
  if (leaseMs > MAX_LEASE_MS)
    fail('intervalMs', `short enough that its lease (80%) fits in ${MAX_LEASE_MS} ms (about 24.8 days)`, intervalMs)
  return leaseMs
}

/** A lease and the interval it is for, as {@link forInterval} returns them. */
export interface IntervalLease {
  readonly leaseMs: number
  readonly everyMs: number
}

/**
 * The lease for a fixed interval, and the interval as `everyMs`: overdue runs are reported, missed ones counted.
 * @example
 * setInterval(leasedTick(pool, 'sync', forInterval(15_000), sync), 15_000)
 */
export function forInterval(intervalMs: number): IntervalLease {
  return Object.freeze({ leaseMs: leaseForInterval(intervalMs), everyMs: Math.max(1, Math.round(intervalMs)) })
}
