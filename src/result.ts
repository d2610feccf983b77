/** Reading a driver's result: a wrong guess toward a win would run a tick twice, so unclear is an error. */
import { formatValue } from './format-value.js'

/** A claim or renew that matched a row (`matched`), and the claim token read from that row. */
export type Reading = { matched: false; claimToken: null } | { matched: true; claimToken: string | null }

export function readResult(result: unknown, jobName: string, action: string): Reading {
  const { rowCount, rows } = (result ?? {}) as { rowCount?: unknown; rows?: unknown }
  const counted = rowCount !== undefined && rowCount !== null
  const listed = Array.isArray(rows)
  if (!counted && !listed)
    failReading(result, jobName, action, "the driver's result has neither a rowCount nor a rows array")
  // job_name is the key, so a statement matches at most one row: any other count is a driver misread.
  if (counted && rowCount !== 0 && rowCount !== 1) failReading(result, jobName, action, 'its rowCount is not 0 or 1')
  if (listed && rows.length > 1) failReading(result, jobName, action, `it has ${rows.length} rows`)
  if (counted && listed && rowCount !== rows.length)
    failReading(result, jobName, action, 'its rowCount and its rows disagree')
  const matched = counted ? rowCount === 1 : (rows as unknown[]).length === 1
  if (!matched) return { matched, claimToken: null }
  const token = ((rows as unknown[] | undefined)?.[0] as { claimed_at?: unknown } | undefined)?.claimed_at
  // Only text can carry the microseconds; a Date (a driver that parsed it) would fence on a rounded value.
  return { matched, claimToken: typeof token === 'string' && token.length > 0 ? token : null }
}

export function firstRow(result: unknown): Record<string, unknown> | undefined {
  const row = (result as { rows?: unknown[] } | null)?.rows?.[0]
  return typeof row === 'object' && row !== null ? (row as Record<string, unknown>) : undefined
}

function failReading(result: unknown, jobName: string, action: string, why: string): never {
  throw new TypeError(
    `pg-cron-lease: cannot tell whether the lease for '${jobName}' was ${action}: ${why}, got ${formatValue(result)}`,
  )
}
