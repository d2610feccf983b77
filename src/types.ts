/** What a driver's `query` resolves to, as far as this library reads it. */
export interface QueryResultLike {
  rowCount?: number | null
  rows?: unknown[]
}

/** A `pg` Pool or client, PGlite, or `fromPostgresJs(sql)`; only `pg` handles are sent named prepared statements. */
export interface Queryable {
  query(text: string, params: unknown[]): PromiseLike<QueryResultLike> | QueryResultLike
}

/** Where the library reports what it decided; every method is optional (`console` fits), and none can change a run. */
export interface LeaseLogger {
  /** Called when a claim loses because another replica holds the lease. */
  debug?(message: string): void
  /** What an operator should fix (an old table shape, an unrecorded outcome, a clock off). Default: `console.warn`. */
  warn?(message: string): void
  /** The default `onError` of `leasedTick`, called as `error(err, jobName)` (pino's order). */
  error?(error: unknown, jobName: string): void
}

/** Background renewal while a long tick runs, fenced on this claim: whole ms, `1 <= beatMs < extendMs <= leaseMs`. */
export interface KeepAlive {
  /** How often to extend the lease while the tick runs, in ms. */
  beatMs: number
  /** How far past each beat the lease reaches, in ms. */
  extendMs: number
}

/** The `history` option: how many of a job's runs its history keeps, counted when each is written. */
export interface HistoryOptions {
  /** The job's last runs kept, whatever their outcome. Default: 100. */
  keep?: number
  /** Besides those, the job's last runs that were not `ok` (error or unfinished), however old. Default: 20. */
  keepFailed?: number
}

/** Options for {@link withCronLease}, which the entry points pick from; every call checks its bag, unknown keys too. */
export interface LeaseOptions {
  /** Informational name stored in the row. Default (also for `''` and `null`): `hostname:pid`. */
  holder?: string | null
  /** The lease table, `name` or `schema.name`. Default: `cron_leases`. */
  table?: string
  /** Receives a debug line when the claim loses, and warnings (see {@link LeaseLogger}). */
  logger?: LeaseLogger | null
  /** Renew in the background while the tick runs. Default: off. */
  keepAlive?: KeepAlive
  /** Prepare statements on a `pg` handle; a pooler that refuses is detected once, then sent plain. Default: `true`. */
  prepare?: boolean
  /** Record how each won tick ended in its row (needs `pg-cron-lease migrate`, else one warning). Default: `true`. */
  record?: boolean
  /** The job's recorded runs kept for `listRuns` ({@link HistoryOptions}); `false`: none. Default: 100 and 20. */
  history?: boolean | HistoryOptions
  /** Fixed interval in ms (max {@link MAX_INTERVAL_MS}): sets the next due time, counts misses. Default: observed. */
  everyMs?: number | null
  /** How far ahead of the database clock an occurrence may lie and still run, in ms. Default: 10% of the lease. */
  clockToleranceMs?: number | null
  /**
   * The scheduled time of this occurrence (`Date` or ISO text with a zone): none runs twice, nor an earlier one.
   * From node-cron: `{ occurrence: ctx.date, nextOccurrence: ctx.task?.getNextRun() }`.
   */
  occurrence?: Date | string | null
  /** When the scheduler fires next, sent as a duration so clock offset plays no part. Default: occurrence + everyMs. */
  nextOccurrence?: Date | string | null
}

/** What a tick receives: who it is, `renew()` to hold its lease longer, and `fence()` for its writes. */
export interface LeaseContext {
  /** Sets this claim's expiry to `ms` (default: `leaseMs`) from now; `false` (and `signal` aborts) once it lost. */
  renew(ms?: number): Promise<boolean>
  /**
   * Fences your open transaction's writes: the job's row stays locked `FOR KEY SHARE` until it ends, so no successor
   * wins meanwhile; a `LeaseLostError` once another claim replaced this one (docs/failure-modes.md#fenced-writes).
   */
  fence(client: Queryable): Promise<void>
  /** The job name passed to `withCronLease`. */
  readonly jobName: string
  /** The holder name written to the row. */
  readonly holder: string
  /** The lease length claimed, in whole milliseconds. */
  readonly leaseMs: number
  /** This claim's `claimed_at` as ISO-8601 UTC text with microseconds; `null` with no row to read. */
  readonly claimToken: string | null
  /** The scheduled time of the occurrence this run is for; `null` when none was named. */
  readonly occurrence: Date | null
  /** Occurrences that fell due since the previous run and will never run; 0 when unknown. */
  readonly missed: number
  /** Aborts, with an error saying why, once the lease is known lost or `drainLeases` stops the run. */
  readonly signal: AbortSignal
}

/** How a call to {@link withCronLease} ended: `ran: true` with the tick's result, or `ran: false`. */
export type LeaseOutcome<T = unknown> = { ran: true; result: T } | { ran: false; result: null }
