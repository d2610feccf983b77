/** The records every step of a run passes along (config, slot, ticket); a won claim's reply becomes a ticket. */
import type { HistoryKeep } from './options.js'
import type { Shape } from './sql.js'
import { MAX_MS } from './time-input.js'
import type { KeepAlive, LeaseContext, LeaseLogger, Queryable } from './types.js'

/** What a claim needs, checked. */
export interface ClaimConfig {
  readonly db: Queryable
  readonly table: string
  readonly jobName: string
  readonly leaseMs: number
  readonly holder: string
  readonly logger: LeaseLogger | undefined
  readonly prepare: boolean
  readonly clockToleranceMs?: number | undefined
  /** How many of the job's runs the history keeps; false: none (the record still runs). */
  readonly history?: HistoryKeep | false | undefined
  /** Whether the won run's outcome is recorded (RunConfig's, and the coordinator's). */
  readonly record?: boolean
  /** Refused before the claim on a handle inside a transaction (checkKeepAliveHandle). */
  readonly keepAlive?: KeepAlive | undefined
}

/** Everything one run of a tick needs, checked. */
export interface RunConfig<T> extends ClaimConfig {
  readonly runTick: (ctx: LeaseContext) => Promise<T> | T
  readonly keepAlive: KeepAlive | undefined
  readonly record: boolean
  readonly everyMs: number | undefined
}

/** Where one call stands in the job's schedule; instants in ms since the epoch, null unknown. */
export interface Slot {
  readonly occurrence: number | null
  readonly nextOccurrence: number | null
  /** Declared, else the gap to the next occurrence. */
  readonly intervalMs: number | null
}

/** The slot of one call, or null when told nothing; a next occurrence stepped past year 9999 is unknown. */
export function slotOf(occurrence: number | null, nextGiven: number | null, everyMs: number | undefined): Slot | null {
  if (occurrence === null && nextGiven === null && everyMs === undefined) return null
  const stepped = everyMs === undefined ? null : (occurrence ?? Date.now()) + everyMs
  const next = nextGiven ?? (stepped !== null && stepped <= MAX_MS ? stepped : null)
  const gap = occurrence !== null && next !== null && next > occurrence ? next - occurrence : null
  return { occurrence, nextOccurrence: next, intervalMs: everyMs ?? gap }
}

/** A won claim: all its fences need. */
export interface Ticket {
  readonly config: ClaimConfig
  readonly claimToken: string | null
  readonly sentAt: number
  readonly shape: Shape
  readonly occurrence: Date | null
  readonly missed: number
  /** The interval to record; null lets the table observe it. */
  readonly intervalMs: number | null
  /** Won by catchUp: the history says so. */
  readonly catchUp: boolean
  /** The claim said claims died before it: its record writes their runs too. */
  readonly unrecorded: boolean
  /**
   * The job's run number, runs not ok and trimmed number, as its claim returned them from the row
   * (recordRunSql's `$13`–`$15`), which nothing but this run's record changes before it; null when
   * the row has none yet.
   */
  readonly runNumbers: readonly [unknown, unknown, unknown] | null
}

/** The ticket of a won claim or catch-up, from its reply's row and the slot it named. */
export function wonTicket(
  config: ClaimConfig,
  claimToken: string | null,
  sentAt: number,
  shape: Shape,
  row: Record<string, unknown> | undefined,
  slot: Slot | null,
  catchUp: boolean,
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
    catchUp,
    unrecorded: row?.unrecorded === true,
    runNumbers: numbered(row) ? [row.run_number, row.failed_runs, row.runs_trimmed] : null,
  }
}

// Sent back as they came (most drivers read a bigint as text): a number or bigint also casts.
function numbered(row: Record<string, unknown> | undefined): row is Record<string, unknown> {
  const number = (value: unknown) => typeof value === 'string' || typeof value === 'number' || typeof value === 'bigint'
  return number(row?.run_number) && number(row?.failed_runs) && number(row?.runs_trimmed)
}

// Most drivers send a bigint as text.
function countOf(value: unknown): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : 0
  return Number.isSafeInteger(n) && n > 0 ? n : 0
}

/** The first row of a driver's result, if it has one. */
export function firstRow(result: unknown): Record<string, unknown> | undefined {
  const row = (result as { rows?: unknown[] } | null)?.rows?.[0]
  return typeof row === 'object' && row !== null ? (row as Record<string, unknown>) : undefined
}
