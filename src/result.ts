/**
 * Reading a driver's result. Drivers disagree on its shape, and guessing wrong in the winning
 * direction would run a tick twice, so anything that is not clearly a win or a loss is an error.
 */
import { describe } from './describe.js'

/** A claim or renew that matched a row (`won`), and the claim token read from that row. */
export type Reading = { won: false; claimToken: null } | { won: true; claimToken: string | null }

/**
 * `rowCount` decides when it is a whole number; otherwise the length of `rows`. `action` names
 * what was attempted ("claimed", "renewed") for the error message.
 */
export function readResult(result: unknown, jobName: string, action: string): Reading {
  const { rowCount, rows } = (result ?? {}) as { rowCount?: unknown; rows?: unknown }
  let won: boolean
  if (typeof rowCount === 'number' && Number.isInteger(rowCount) && rowCount >= 0) won = rowCount > 0
  else if (Array.isArray(rows)) won = rows.length > 0
  else {
    throw new TypeError(
      `pg-cron-lease: cannot tell whether the lease for '${jobName}' was ${action}: the driver's result has ` +
        `neither a whole-number rowCount nor a rows array, got ${describe(result)}`,
    )
  }
  if (!won) return { won, claimToken: null }
  const first: unknown = Array.isArray(rows) ? rows[0] : undefined
  const token = (first as { claimed_at?: unknown } | undefined)?.claimed_at
  // Only text can carry the microseconds; a Date (a driver that parsed it) would fence on a rounded value.
  return { won, claimToken: typeof token === 'string' && token.length > 0 ? token : null }
}
