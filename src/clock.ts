/**
 * This replica's clock against the database's, estimated at no cost from each won claim. The
 * database decides who wins, but this replica's clock decides when its timer fires: one that is
 * far off fires at the wrong moments, which no lease can correct, so it is reported.
 */
import { escapeControls } from './escape.js'
import { warn } from './log.js'
import { clearWarning, warnOnce } from './state.js'
import type { LeaseLogger } from './types.js'

/**
 * Milliseconds on a clock that only moves forward, for timing this process's own waits; it never
 * decides who holds a lease (the database clock does). `performance.now()` is monotonic, and
 * unlike `process.hrtime.bigint()` allocates nothing on the claim path.
 */
export function monotonicMs(): number {
  return performance.now()
}

/**
 * This replica's wall clock minus the database's: the claim token is the database time the
 * statement ran, which lies between sending and receiving, so the midpoint is off by at most half
 * the round trip. Positive: this replica's clock is ahead. Null when the token does not parse.
 */
export function clockOffset(claimToken: string, sentWallMs: number, receivedWallMs: number): number | null {
  const databaseMs = Date.parse(claimToken)
  return Number.isFinite(databaseMs) ? Math.round((sentWallMs + receivedWallMs) / 2 - databaseMs) : null
}

/**
 * One `logger.warn` per job while the offset, less what the round trip cannot rule out (half of
 * it, plus the wall clock's 1 ms step), exceeds 10% of the lease: a replica late by more than the
 * gap between the lease and the interval runs the occurrence again.
 */
export function checkClock(
  table: string,
  jobName: string,
  offsetMs: number,
  roundTripMs: number,
  leaseMs: number,
  logger: LeaseLogger | undefined,
): void {
  const about = `clock:${jobName}`
  if (Math.abs(offsetMs) - (roundTripMs / 2 + 1) <= leaseMs * 0.1) {
    clearWarning(table, about)
    return
  }
  warnOnce(table, about, () =>
    warn(
      logger,
      `pg-cron-lease: this replica's clock is ${Math.abs(offsetMs)} ms ${offsetMs > 0 ? 'ahead of' : 'behind'} the ` +
        `database's (more than 10% of the ${leaseMs} ms lease of '${escapeControls(jobName)}'); its scheduler fires ` +
        'at the wrong moments, which the lease cannot correct: fix its time sync (NTP)',
    ),
  )
}
