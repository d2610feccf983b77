/** The records every step of a run passes along (config, slot, ticket); a won claim's reply becomes a ticket. */
import { DEFAULTS, type HistoryKeep } from './options.js'
import { firstRow } from './result.js'
import type { NamedSlot } from './scheduler-slot.js'
import type { ClaimKind } from './sql.js'
import type { KeepAlive, LeaseContext, LeaseLogger, Queryable } from './types.js'
import { MAX_MS } from './validate.js'

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
  readonly record: boolean
  readonly keepAlive?: KeepAlive | undefined
}

export interface RunConfig<T> extends ClaimConfig {
  readonly runTick: (ctx: LeaseContext) => Promise<T> | T
  readonly everyMs?: number | undefined
}

export interface Slot extends NamedSlot {
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

export interface Ticket {
  /** The run's identity in the channels' messages: a small frozen object, one per run, safe to log. */
  readonly run: Readonly<{ jobName: string; claimToken: string | null }>
  readonly config: ClaimConfig
  readonly claimToken: string | null
  readonly sentAt: number
  /** What the claim wrote besides its lease; a `run` or `history` claim's run is recorded the same way. */
  readonly kind: ClaimKind
  readonly occurrence: Date | null
  readonly missed: number
  readonly catchUp: boolean
  /** The run's number in the history, as its claim returned it (sent back as it came); null: no row there. */
  readonly runNumber: string | number | bigint | null
}

export function wonTicket(
  config: ClaimConfig,
  claimToken: string | null,
  sentAt: number,
  kind: ClaimKind,
  result: unknown,
  slot: Slot | null,
  catchUp = false,
): Ticket {
  const row = firstRow(result)
  const occurrence = typeof row?.occurrence === 'string' ? Date.parse(row.occurrence) : (slot?.occurrence ?? null)
  const missed = typeof row?.missed === 'number' || typeof row?.missed === 'string' ? Number(row.missed) : 0
  const number = row?.run_number
  // Most drivers read a bigint as text; a number or bigint also casts.
  const runNumber =
    typeof number === 'string' || typeof number === 'number' || typeof number === 'bigint' ? number : null
  return {
    run: Object.freeze({ jobName: config.jobName, claimToken }),
    config,
    claimToken,
    sentAt,
    kind,
    occurrence: occurrence !== null && Number.isFinite(occurrence) ? new Date(occurrence) : null,
    missed: Number.isSafeInteger(missed) && missed > 0 ? missed : 0,
    catchUp,
    runNumber,
  }
}

/** How many runs, and runs not ok besides, the job's history keeps: the last two parameters of a `history` claim. */
export function historyParams({ history }: ClaimConfig): [number, number] {
  const { keep, keepFailed } = typeof history === 'object' ? history : DEFAULTS.history
  return [keep, keepFailed]
}
