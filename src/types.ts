/**
 * What a driver's `query` resolves to, as far as this library reads it: a `rowCount`, a `rows`
 * array, or both (`pg`, PGlite and most wrappers give both).
 */
export interface QueryResultLike {
  rowCount?: number | null
  rows?: unknown[]
}

/**
 * Anything that runs a parameterised statement: a `pg` Pool, Client or PoolClient, a transaction
 * client, PGlite, or a small adapter (see `fromPostgresJs`). The library calls
 * `query(text, params)` with positional `$n` parameters; only a `pg` Pool, Client or PoolClient
 * is also sent `query({ name, text, values })`, a named prepared statement (see `prepare`).
 *
 * @example
 * import pg from 'pg'
 * const db: Queryable = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 */
export interface Queryable {
  query(text: string, params: unknown[]): PromiseLike<QueryResultLike> | QueryResultLike
}

/**
 * Where the library reports what it decided. Both methods are optional; `console` fits.
 *
 * @example
 * withCronLease(pool, 'report', LEASE.HOURLY, run, { logger: console })
 */
export interface LeaseLogger {
  /** Called when a claim loses because another replica holds the lease. */
  debug?(message: string): void
  /**
   * Called with something an operator should fix: a lease table of the original shape (outcomes
   * are not recorded until `pg-cron-lease migrate` upgrades it), an outcome that could not be
   * recorded, or this replica's clock off by more than 10% of a lease. Without it, `console.warn`.
   */
  warn?(message: string): void
  /**
   * The default `onError` of `leasedTick`: called as `error(err, jobName)` with a claim or tick
   * error, the argument order of `onError` (and of pino's `logger.error(err, msg)`).
   */
  error?(error: unknown, jobName: string): void
}

/**
 * Background renewal while a long tick runs. Every `beatMs` the library extends the lease so it
 * ends no earlier than `extendMs` from that beat, fenced on this claim. Rules: whole milliseconds,
 * `1 <= beatMs < extendMs <= leaseMs`. After the tick settles the beats stop, and the lease ends
 * at most `extendMs` after the last one.
 *
 * @example
 * withCronLease(pool, 'import', 60_000, runImport, { keepAlive: { beatMs: 10_000, extendMs: 30_000 } })
 */
export interface KeepAlive {
  /** How often to extend the lease while the tick runs, in ms. */
  beatMs: number
  /** How far past each beat the lease reaches, in ms. */
  extendMs: number
}

/**
 * Options for {@link withCronLease}, and the declarations every other entry point picks its
 * options from. Every key is optional; an unknown key is rejected, so a misspelt option never
 * silently falls back to a default. Passing the same object on every tick is cheap: it is checked
 * once, and again only when it reads differently (a nested object such as `keepAlive` or `logger`
 * is compared by identity, so replace it rather than change it in place).
 *
 * @example
 * const opts: LeaseOptions = { table: 'jobs.leases', holder: 'worker-3', logger: console }
 */
export interface LeaseOptions {
  /** Informational name stored in the row. Default (also for `''` and `null`): `hostname:pid`. */
  holder?: string | null
  /** The lease table, `name` or `schema.name`. Default: `cron_leases`. */
  table?: string
  /** Receives a debug line when the claim loses, and warnings (see {@link LeaseLogger}). */
  logger?: LeaseLogger | null
  /** Renew in the background while the tick runs. Default: off. */
  keepAlive?: KeepAlive
  /**
   * Send the claim, renews and keep-alive beats as named prepared statements when `db` is a `pg`
   * Pool, Client or PoolClient, so the server parses and plans them once per connection. A pooler
   * that refuses them (PgBouncer before 1.21 in transaction mode) is detected on the first refusal
   * and that `db` falls back to plain statements for good, without an error or a missed tick.
   * `false` never prepares. Other drivers are never sent a prepared statement. Default: `true`.
   */
  prepare?: boolean
  /**
   * Record how each won tick ended (when it settled, how long it ran, `ok` or `error` with the
   * error's first line) in the lease row, for `listLeases`, `pg-cron-lease status` and `check`.
   * Needs the outcome columns (`pg-cron-lease migrate`); on a table without them recording is
   * skipped with one warning. Default: `true`.
   */
  record?: boolean
  /**
   * The job's interval in ms, for a job that runs at a fixed interval. The winner stores when the
   * job is next due (one interval after this occurrence, or after now when none is named) and
   * counts the occurrences missed in between; left out, the table observes the interval between
   * two recorded runs, and only `nextOccurrence` tells when the job is next due. `forInterval`
   * gives it together with the lease. At most {@link MAX_INTERVAL_MS}; `null` is none.
   */
  everyMs?: number | null
  /**
   * How far ahead of the database clock a named occurrence may lie and still run, in whole ms:
   * a replica whose clock runs further ahead than this never runs an occurrence early, and warns
   * once per job while that lasts. Default (also for `null`): 10% of the lease, rounded down.
   */
  clockToleranceMs?: number | null
  /**
   * The scheduled time of the occurrence this call is for: a `Date`, or ISO-8601 text with a zone.
   * The claim then wins only while no claim of this or a later occurrence of the job has been made
   * (compared in the database), besides the lease being free: a replica, however late, never runs
   * an occurrence twice, nor an earlier one. Left out, the lease alone decides, as before. On a
   * table without the occurrence columns (`pg-cron-lease migrate` adds them) the lease decides
   * alone, with one warning.
   *
   * @example
   * cron.schedule('0 * * * *', (ctx) =>
   *   withCronLease(pool, 'report', LEASE.HOURLY, run, { occurrence: ctx.date, nextOccurrence: ctx.task?.getNextRun() }),
   * )
   */
  occurrence?: Date | string | null
  /**
   * When this replica's scheduler fires next, read on this replica's clock (a `Date`, or ISO text
   * with a zone). The winner stores it as the job's next due time by the database clock, carried
   * across as a duration, so this replica's clock offset plays no part; one already past is stored
   * as past. `status`, `check` and `listLeases` report the job overdue once it passes unclaimed.
   * Left out, it is one `everyMs` after the occurrence (or after now), if `everyMs` is given.
   */
  nextOccurrence?: Date | string | null
}

/**
 * What a tick receives: who it is, the only safe way to hold its lease longer, and the fence for its
 * own writes.
 *
 * @example
 * await withCronLease(pool, 'import', LEASE.HOURLY, async (ctx) => {
 *   for (const batch of batches) {
 *     if (ctx.signal.aborted) return
 *     await importBatch(batch, { signal: ctx.signal })
 *     if (!(await ctx.renew())) return // someone else holds it now
 *   }
 * })
 */
export interface LeaseContext {
  /**
   * Sets this claim's expiry to `ms` (default: `leaseMs`) from now by the database clock, only if
   * this claim still holds the lease. Resolves `false` once the lease has expired or another
   * claim (even one with the same holder name) has replaced it; `ctx.signal` then aborts. Rejects
   * with the driver's error on a database error, and with a TypeError when the claim's result
   * carried no token to fence on (a driver that reports only `rowCount`).
   */
  renew(ms?: number): Promise<boolean>
  /**
   * Fences the tick's own writes on this claim. Given a client with a transaction open (yours),
   * it checks that no other claim has replaced this one, and locks the job's row so that no new
   * claim of the job can win until that transaction ends: commit after your writes, and they
   * cannot land once a successor has started. A lease that ran out with no other claim since is
   * still this claim's to fence.
   *
   * Resolves when fenced. Rejects with a `LeaseLostError` (`code` `'PG_CRON_LEASE_LOST'`)
   * when another claim has replaced this one, and `ctx.signal` then aborts: roll back. Rejects
   * with a TypeError naming `client` for a handle that has no transaction open (a `pg` Pool, or a
   * `pg` client before `BEGIN`), and when the claim's result carried no token; with an Error once
   * the tick has settled; with the driver's error on a database error. On a `pg` client the
   * fence runs under a savepoint of its own, so a failure never leaves your transaction aborted.
   *
   * The row lock is `FOR KEY SHARE`: this claim's `renew()` and keep-alive beats go on without
   * waiting while it is held, and the fence itself waits only for a statement holding the row
   * `FOR UPDATE` (a claim racing it, `pauseJob`, `releaseLease`), until that one ends. In a fleet
   * that still runs the original package, its claims are kept out by the lease alone, not by the
   * fence: keep the lease longer than the transaction (keep-alive does), or see
   * docs/failure-modes.md#fenced-writes for the index that makes them wait for the fence.
   *
   * @example
   * await withCronLease(pool, 'ledger:close', LEASE.DAILY, async (ctx) => {
   *   const client = await pool.connect()
   *   try {
   *     await client.query('BEGIN')
   *     await ctx.fence(client) // rejects with LeaseLostError once another claim runs the job
   *     await client.query('INSERT INTO ledger_closings (day) VALUES (current_date)')
   *     await client.query('COMMIT')
   *   } catch (error) {
   *     await client.query('ROLLBACK')
   *     throw error
   *   } finally {
   *     client.release()
   *   }
   * })
   */
  fence(client: Queryable): Promise<void>
  /** The job name passed to `withCronLease`. */
  readonly jobName: string
  /** The holder name written to the row. */
  readonly holder: string
  /** The lease length claimed, in whole milliseconds. */
  readonly leaseMs: number
  /**
   * This claim's `claimed_at` as ISO-8601 UTC text with microseconds, e.g.
   * `2026-11-29T22:12:11.428993Z`; `null` when the driver returned no row to read it from.
   */
  readonly claimToken: string | null
  /**
   * The scheduled time of the occurrence this run is for, as the scheduler named it
   * (`opts.occurrence`, a `leasedTick` call's scheduler, node-cron's key, or the occurrence a
   * catch-up run makes up for); `null` when none was named. Whole milliseconds, as a `Date` holds.
   */
  readonly occurrence: Date | null
  /**
   * How many occurrences fell due since the previous run and will never run, not counting this
   * one; 0 when unknown (no interval or no next due time known yet, or a table without the
   * occurrence columns). See docs/schedulers.md#missed-occurrences for how it is counted.
   */
  readonly missed: number
  /**
   * Aborts, with an Error saying the lease was lost, as soon as the library learns this claim no
   * longer holds the lease: a `renew()` that resolves false, or a keep-alive beat that finds the
   * lease gone or cannot reach the database before the lease runs out.
   */
  readonly signal: AbortSignal
}

/**
 * How a call to {@link withCronLease} ended: `ran: true` with the tick's return value, or
 * `ran: false` (another replica holds the lease) with `result: null`.
 *
 * @example
 * const { ran, result } = await withCronLease(pool, 'report', LEASE.HOURLY, () => 42)
 */
export type LeaseOutcome<T = unknown> = { ran: true; result: T } | { ran: false; result: null }
