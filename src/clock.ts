/** This replica's clock against the database's, from each won claim: a far-off timer fires wrong. */
import { escapeControls } from './format-value.js'
import { clearWarning, firstWarning, warn } from './log.js'
import type { ClaimConfig } from './ticket.js'

/** Wall clock minus the database's, from the round trip's midpoint (± half of it); null unparsed. */
export function clockOffset(claimToken: string, sentWallMs: number, receivedWallMs: number): number | null {
  const databaseMs = Date.parse(claimToken)
  return Number.isFinite(databaseMs) ? Math.round((sentWallMs + receivedWallMs) / 2 - databaseMs) : null
}

/** Warns once per job while the offset, less the round-trip doubt, exceeds 10% of the lease. */
export function checkClock(config: ClaimConfig, offsetMs: number, roundTripMs: number): void {
  const { table, jobName, leaseMs, logger } = config
  const about = `clock:${jobName}`
  const within = Math.abs(offsetMs) - (roundTripMs / 2 + 1) <= leaseMs * 0.1
  if (within) clearWarning(table, about)
  if (within || !firstWarning(table, about)) return
  warn(
    logger,
    `pg-cron-lease: this replica's clock is ${Math.abs(offsetMs)} ms ${offsetMs > 0 ? 'ahead of' : 'behind'} the ` +
      `database's (more than 10% of the ${leaseMs} ms lease of '${escapeControls(jobName)}'); its scheduler fires ` +
      'at the wrong moments, which the lease cannot correct: fix its time sync (NTP)',
  )
}
