import { publishClaim, traceTick } from './channels.js'
import { checkClock, clockOffset } from './clock.js'
import { monotonicMs, openContext } from './context.js'
import { compileOptions, type EntryPoint } from './options.js'
import { migrateCommand, recordOutcome, type Settled } from './outcome.js'
import { intervalOfLease } from './presets.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { DEFAULT_TABLE } from './sql.js'
import { tableState } from './state.js'
import type { KeepAlive, LeaseContext, LeaseLogger, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkFunction, checkJobName, checkMs, checkQueryable } from './validate.js'

/**
 * Runs `runTick` on exactly one replica per occurrence. Every replica calls this on every tick;
 * one atomic statement gives the lease to a single claimant, which runs the tick, while the
 * others resolve `{ ran: false, result: null }` without writing anything.
 *
 * The lease is never released: it lasts `leaseMs` by the database clock (about 80% of the
 * interval, see {@link LEASE}), so a replica whose timer fires late still finds it taken.
 *
 * Failure rule, a missed occurrence beats a duplicate: a bad argument rejects with a TypeError
 * before any query; a claim error rejects unchanged and the tick does not run; a tick that throws
 * rejects unchanged and keeps the lease. When the tick settles, its outcome is recorded in the
 * lease row (see `record`); that never changes the result.
 *
 * @example
 * import cron from 'node-cron'
 * import pg from 'pg'
 * import { LEASE, withCronLease } from 'pg-cron-lease'
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
 * cron.schedule('0 * * * *', () =>
 *   withCronLease(pool, 'billing:hourly', LEASE.HOURLY, async (ctx) => {
 *     await chargeCustomers()
 *   }),
 * )
 */
export function withCronLease<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeaseOptions,
): Promise<LeaseOutcome<T>> {
  let config: RunConfig<T>
  try {
    config = runConfig('withCronLease', db, jobName, leaseMs, runTick, opts)
  } catch (error) {
    return Promise.reject(error)
  }
  return runLease(config)
}

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
}

/** Everything one run of a tick needs, checked once. */
export interface RunConfig<T> extends ClaimConfig {
  readonly runTick: (ctx: LeaseContext) => Promise<T> | T
  readonly keepAlive: KeepAlive | undefined
  readonly record: boolean
  /** The declared interval; left out, the one `leaseForInterval` was given for this lease, if any. */
  readonly everyMs: number | undefined
}

/**
 * A won claim, all its fences need: the claim it was made with, the token it is fenced on, when it
 * was sent (`monotonicMs()`), and whether the table can take the outcome record.
 */
export interface Ticket {
  readonly config: ClaimConfig
  /** `claimed_at` as text with microseconds; null when the driver returned no row to read it from. */
  readonly claimToken: string | null
  readonly sentAt: number
  /** Whether the table has the outcome columns; undefined when the reply did not say. */
  readonly recordable: boolean | undefined
}

/**
 * The arguments of `withCronLease` and `leasedTick`, checked in the order they are declared, with
 * the options compiled once per options object (src/options.ts). Throws the TypeError of the first
 * bad one.
 */
export function runConfig<T>(
  entry: EntryPoint,
  db: unknown,
  jobName: unknown,
  leaseMs: unknown,
  runTick: unknown,
  opts: unknown,
): RunConfig<T> & { options: ReturnType<typeof compileOptions> } {
  const queryable = checkQueryable(db)
  const job = checkJobName(jobName)
  const ms = checkMs(leaseMs, 'leaseMs')
  const tick = checkFunction<(ctx: LeaseContext) => Promise<T> | T>(runTick, 'runTick')
  const options = compileOptions(entry, opts, ms)
  return {
    db: queryable,
    jobName: job,
    leaseMs: ms,
    runTick: tick,
    holder: options.holder,
    table: options.table,
    logger: options.logger,
    keepAlive: options.keepAlive,
    prepare: options.prepare,
    record: options.record,
    everyMs: options.everyMs,
    options,
  }
}

/**
 * The one run path behind `withCronLease` and `leasedTick`: claim, run the tick with its context,
 * record the outcome. The config must already be checked.
 *
 * The losing path (every tick of every replica but one) is kept to plain promise steps, and so is
 * everything it calls: each `async` layer costs turns of the microtask queue, and with many cron
 * jobs those add up against a claim that is itself one short round trip.
 */
export function runLease<T>(config: RunConfig<T>): Promise<LeaseOutcome<T>> {
  return claim(config).then((ticket) => (ticket === null ? LOST : runClaimed(config, ticket)))
}

const LOST: LeaseOutcome<never> = Object.freeze({ ran: false, result: null })

async function runClaimed<T>(config: RunConfig<T>, ticket: Ticket): Promise<LeaseOutcome<T>> {
  const { jobName, leaseMs, holder, keepAlive } = config
  const { claimToken } = ticket
  if (keepAlive && claimToken === null) {
    throw new TypeError(
      `pg-cron-lease: keepAlive cannot fence the lease for '${jobName}': the claim's result had no row to read ` +
        'its claim token from; the lease is held until it expires and the tick did not run',
    )
  }

  const { ctx, close } = openContext(ticket, keepAlive)
  const startedAt = monotonicMs()
  let settled: Settled = { outcome: 'ok' }
  try {
    const result = await traceTick(
      () => config.runTick(ctx),
      () => ({ jobName, holder, claimToken, leaseMs }),
    )
    return { ran: true, result }
  } catch (error) {
    settled = { outcome: 'error', error }
    throw error
  } finally {
    close()
    if (config.record) {
      const everyMs = config.everyMs ?? intervalOfLease(leaseMs)
      await recordOutcome(ticket, monotonicMs() - startedAt, everyMs, settled)
    }
  }
}

/**
 * The claim step on its own: one statement, its result read, the outcome published. Shared by
 * runLease and leaseCoordinator (which runs no tick itself), so there is one claim path. The
 * config must already be checked. Resolves the ticket of a won claim, or null for a lost one; a
 * driver error or an unreadable result rejects.
 */
export function claim(config: ClaimConfig): Promise<Ticket | null> {
  const { db, table, jobName, leaseMs, holder, prepare } = config
  const sentAt = monotonicMs()
  const sentWallMs = Date.now()
  return runStatement(db, tableState(table).claim, [jobName, leaseMs, holder], prepare).then(
    (result) => readClaim(config, result, sentAt, sentWallMs),
    (error: unknown) => Promise.reject(missingTable(error, table)),
  )
}

/**
 * A claim on a table that does not exist (42P01, naming the lease table) says which table and how
 * to make it; the driver's error stays as `cause`, and its `code` on the error. Any
 * other error is unchanged.
 */
function missingTable(error: unknown, table: string): unknown {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  // Postgres names the relation as written (`relation "jobs.leases" does not exist`); a 42P01 about
  // another one (a trigger on the table naming a missing relation) is not this.
  if (code !== '42P01' || typeof message !== 'string' || !message.includes(`"${table}"`)) return error
  // The driver's code is kept on the error, so code that already tests for 42P01 still does.
  return Object.assign(
    new Error(
      `pg-cron-lease: the lease table ${table} does not exist (or this role cannot see it): create it with ` +
        `\`${migrateCommand(table)}\`, or run createTableSql(${table === DEFAULT_TABLE ? '' : JSON.stringify(table)}) ` +
        'in a migration; the tick did not run',
      { cause: error },
    ),
    { code: '42P01' },
  )
}

function readClaim(config: ClaimConfig, result: unknown, sentAt: number, sentWallMs: number): Ticket | null {
  const { table, jobName, leaseMs, holder, logger } = config
  const { matched: won, claimToken } = readResult(result, jobName, 'claimed')
  if (!won) {
    publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs: null }))
    logger?.debug?.(`pg-cron-lease: '${jobName}' skipped: lease held by another replica`)
    return null
  }
  const receivedWallMs = Date.now()
  const clockOffsetMs = claimToken !== null ? clockOffset(claimToken, sentWallMs, receivedWallMs) : null
  publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs }))
  if (clockOffsetMs !== null) checkClock(table, jobName, clockOffsetMs, receivedWallMs - sentWallMs, leaseMs, logger)
  return { config, claimToken, sentAt, recordable: readRecordable(result) }
}

function readRecordable(result: unknown): boolean | undefined {
  const flag = (result as { rows?: { recordable?: unknown }[] } | null)?.rows?.[0]?.recordable
  return typeof flag === 'boolean' ? flag : undefined
}
