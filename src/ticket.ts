/**
 * The shapes every step of a run passes along (a claim's config, the slot it names, the ticket of
 * a won claim), and the one place a won claim's reply becomes a ticket. A leaf: it imports only
 * the public types, so any module can use it without a cycle.
 */
import type { Shape } from './sql.js'
import type { KeepAlive, LeaseContext, LeaseLogger, Queryable } from './types.js'

/** What a claim needs, checked: the coordinator builds one per task run, the tick entry points one per call. */
export interface ClaimConfig {
  readonly db: Queryable
  readonly table: string
  readonly jobName: string
  readonly leaseMs: number
  readonly holder: string
  readonly logger: LeaseLogger | undefined
  /** Send it as a named prepared statement where the driver allows it. */
  readonly prepare: boolean
  /** How far ahead of the database clock an occurrence may lie; undefined: 10% of the lease. */
  readonly clockToleranceMs?: number | undefined
}

/** Everything one run of a tick needs, checked once. */
export interface RunConfig<T> extends ClaimConfig {
  readonly runTick: (ctx: LeaseContext) => Promise<T> | T
  readonly keepAlive: KeepAlive | undefined
  readonly record: boolean
  /** The declared interval, if any. */
  readonly everyMs: number | undefined
}

/**
 * Where one call stands in the job's schedule, as this replica's scheduler knows it: what the
 * claim is keyed on and what the winner stores. Instants are ms since the epoch; null is unknown.
 */
export interface Slot {
  /** The occurrence the call is for. */
  readonly occurrence: number | null
  /** When this replica's scheduler fires next, on this replica's clock. */
  readonly nextOccurrence: number | null
  /** The job's interval, for counting missed occurrences: declared, else the gap to the next occurrence. */
  readonly intervalMs: number | null
}

/** The last instant stored or printed: `new Date()` reads four-digit years only. */
const MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999)

/**
 * The slot of one call from what it was told, or null when it was told nothing (the claim is then
 * the lease-only claim). With `everyMs` the next occurrence is one interval after this one, or
 * after now when none is named; one past year 9999 is unknown, so nothing unreadable is stored.
 */
export function slotOf(
  occurrence: number | null,
  nextOccurrence: number | null,
  everyMs: number | undefined,
): Slot | null {
  if (occurrence === null && nextOccurrence === null && everyMs === undefined) return null
  const stepped = everyMs === undefined ? null : (occurrence ?? Date.now()) + everyMs
  const next = nextOccurrence ?? (stepped !== null && stepped <= MAX_MS ? stepped : null)
  const gap = occurrence !== null && next !== null && next > occurrence ? next - occurrence : null
  return { occurrence, nextOccurrence: next, intervalMs: everyMs ?? gap }
}

/**
 * A won claim, all its fences need: the claim it was made with, the token it is fenced on, when it
 * was sent (monotonic ms), and the table's shape.
 */
export interface Ticket {
  readonly config: ClaimConfig
  /** `claimed_at` as text with microseconds; null when the driver returned no row to read it from. */
  readonly claimToken: string | null
  readonly sentAt: number
  /** The table's shape when the claim was made: the current one takes the outcome record. */
  readonly shape: Shape
  /** The occurrence the call named (on the original shape, named but not kept), or the catch-up's; null: none. */
  readonly occurrence: Date | null
  /** Occurrences that fell due unclaimed before this one (0 when unknown). */
  readonly missed: number
  /** The interval to record as the job's: the slot's or the catch-up's, or null to let the table observe it. */
  readonly intervalMs: number | null
}

/**
 * The ticket of a won claim or catch-up, from its reply's row (`missed`, `occurrence`,
 * `interval_ms`, where the statement returns them) and the slot it named.
 */
export function wonTicket(
  config: ClaimConfig,
  claimToken: string | null,
  sentAt: number,
  shape: Shape,
  row: Record<string, unknown> | undefined,
  slot: Slot | null,
): Ticket {
  const occurrence = typeof row?.occurrence === 'string' ? Date.parse(row.occurrence) : (slot?.occurrence ?? null)
  const intervalMs = Number(row?.interval_ms)
  return {
    config,
    claimToken,
    sentAt,
    shape,
    occurrence: occurrence !== null && Number.isFinite(occurrence) ? new Date(occurrence) : null,
    missed: countOf(row?.missed),
    intervalMs: Number.isFinite(intervalMs) && intervalMs > 0 ? intervalMs : (slot?.intervalMs ?? null),
  }
}

/** A count from the database: a bigint arrives as text from most drivers. */
function countOf(value: unknown): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : 0
  return Number.isSafeInteger(n) && n > 0 ? n : 0
}

/** The first row of a driver's result, if it has one. */
export function firstRow(result: unknown): Record<string, unknown> | undefined {
  const row = (result as { rows?: unknown[] } | null)?.rows?.[0]
  return typeof row === 'object' && row !== null ? (row as Record<string, unknown>) : undefined
}
