import { publishClaim, traceTick } from './channels.js'
import { type Claim, monotonicMs, openContext } from './context.js'
import { migrateCommand, recordOutcome, type Settled, warn } from './outcome.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { DEFAULT_TABLE, tickStatements } from './sql.js'
import type { KeepAlive, LeaseContext, LeaseLogger, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkLeaseArgs, commonLeaseArgs } from './validate.js'

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
  let run: LeaseRun<T>
  try {
    run = commonLeaseArgs<T>(db, jobName, leaseMs, runTick, opts) ?? checkLeaseArgs(db, jobName, leaseMs, runTick, opts)
  } catch (error) {
    return Promise.reject(error)
  }
  return runLease(run)
}

/** Everything one run needs, already validated: what `checkLeaseArgs` returns. */
export interface LeaseRun<T> extends ClaimRequest {
  runTick: (ctx: LeaseContext) => Promise<T> | T
  keepAlive: KeepAlive | undefined
  record: boolean
  everyMs: number | undefined
}

/**
 * The one run path behind `withCronLease` and `leasedTick`: claim, run the tick with its context,
 * record the outcome. Arguments must already be validated.
 *
 * The losing path (every tick of every replica but one) is kept to plain promise steps, and so is
 * everything it calls: each `async` layer costs turns of the microtask queue, and with many cron
 * jobs those add up against a claim that is itself one short round trip.
 */
export function runLease<T>(run: LeaseRun<T>): Promise<LeaseOutcome<T>> {
  return claim(run).then((claimed) => (claimed.won ? runClaimed(run, claimed) : { ran: false, result: null }))
}

async function runClaimed<T>(run: LeaseRun<T>, { claimToken, sentAt, recordable }: Claimed): Promise<LeaseOutcome<T>> {
  const { db, table, jobName, leaseMs, holder, keepAlive, prepare } = run
  if (keepAlive && claimToken === null) {
    throw new TypeError(
      `pg-cron-lease: keepAlive cannot fence the lease for '${jobName}': the claim's result had no row to read ` +
        'its claim token from; the lease is held until it expires and the tick did not run',
    )
  }

  const claimed: Claim = { db, table, jobName, holder, leaseMs, claimToken, sentAt, prepare }
  const { ctx, close } = openContext(claimed, keepAlive)
  const startedAt = monotonicMs()
  let settled: Settled = { outcome: 'ok' }
  try {
    const result = await traceTick(
      () => run.runTick(ctx),
      () => ({ jobName, holder, claimToken, leaseMs }),
    )
    return { ran: true, result }
  } catch (error) {
    settled = { outcome: 'error', error }
    throw error
  } finally {
    close()
    if (run.record) {
      const durationMs = monotonicMs() - startedAt
      await recordOutcome({ ...run, claimToken, durationMs, recordable }, settled)
    }
  }
}

/** A claim's validated inputs. */
export interface ClaimRequest {
  db: Queryable
  table: string
  jobName: string
  leaseMs: number
  holder: string
  logger: LeaseLogger | undefined
  /** Send it as a named prepared statement where the driver allows it. */
  prepare: boolean
}

/** A claim's answer: whether it won, its token, and when it was sent (`monotonicMs()`). */
export interface Claimed {
  won: boolean
  claimToken: string | null
  sentAt: number
  /** Whether the table has the outcome columns; only a won claim with a row to read can say. */
  recordable: boolean | undefined
}

// Jobs whose claims currently show this replica's clock off by more than 10% of the lease.
const skewedJobs = new Set<string>()

/**
 * The claim step on its own: one statement, its result read, the outcome published. Shared by
 * runLease and leaseCoordinator (which runs no tick itself), so there is one claim path.
 * Arguments must already be validated. A driver error or an unreadable result rejects.
 */
export function claim(request: ClaimRequest): Promise<Claimed> {
  const { db, table, jobName, leaseMs, holder, prepare } = request
  const sentAt = monotonicMs()
  const sentWallMs = Date.now()
  return runStatement(db, tickStatements(table).claim, [jobName, leaseMs, holder], prepare).then(
    (result) => readClaim(request, result, sentAt, sentWallMs),
    (error: unknown) => Promise.reject(missingTable(error, table)),
  )
}

/**
 * A claim on a table that does not exist (42P01: the claim names no other relation) says which
 * table and how to make it; the driver's error stays as `cause`, and its `code` on the error. Any
 * other error is unchanged.
 */
function missingTable(error: unknown, table: string): unknown {
  if ((error as { code?: unknown } | null)?.code !== '42P01') return error
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

function readClaim(request: ClaimRequest, result: unknown, sentAt: number, sentWallMs: number): Claimed {
  const { jobName, leaseMs, holder, logger } = request
  const { matched: won, claimToken } = readResult(result, jobName, 'claimed')
  const receivedWallMs = Date.now()
  const clockOffsetMs = won && claimToken !== null ? clockOffset(claimToken, sentWallMs, receivedWallMs) : null
  publishClaim(() => ({ jobName, holder, won, claimToken, clockOffsetMs }))
  if (!won) logger?.debug?.(`pg-cron-lease: '${jobName}' skipped: lease held by another replica`)
  if (clockOffsetMs !== null) {
    // Only what the round trip cannot explain counts: half of it, plus the wall clock's 1 ms step.
    const uncertaintyMs = (receivedWallMs - sentWallMs) / 2 + 1
    checkClock(jobName, clockOffsetMs, uncertaintyMs, leaseMs, logger)
  }
  const recordable = won ? readRecordable(result) : undefined
  return { won, claimToken, sentAt, recordable }
}

function readRecordable(result: unknown): boolean | undefined {
  const flag = (result as { rows?: { recordable?: unknown }[] } | null)?.rows?.[0]?.recordable
  return typeof flag === 'boolean' ? flag : undefined
}

/**
 * This replica's wall clock minus the database's, estimated at no cost from a won claim: the
 * token is the database time the statement ran, which lies between sending and receiving, so the
 * midpoint is off by at most half the round trip. Positive: this replica's clock is ahead.
 */
function clockOffset(claimToken: string, sentWallMs: number, receivedWallMs: number): number | null {
  const databaseMs = Date.parse(claimToken)
  return Number.isFinite(databaseMs) ? Math.round((sentWallMs + receivedWallMs) / 2 - databaseMs) : null
}

// The database decides who wins, but this replica's clock decides when its timer fires: one that
// is late by more than the gap between the lease and the interval runs the occurrence again.
function checkClock(
  jobName: string,
  offsetMs: number,
  uncertaintyMs: number,
  leaseMs: number,
  logger: LeaseLogger | undefined,
): void {
  if (Math.abs(offsetMs) - uncertaintyMs <= leaseMs * 0.1) {
    skewedJobs.delete(jobName)
    return
  }
  if (skewedJobs.has(jobName)) return
  skewedJobs.add(jobName)
  warn(
    logger,
    `pg-cron-lease: this replica's clock is ${Math.abs(offsetMs)} ms ${offsetMs > 0 ? 'ahead of' : 'behind'} the ` +
      `database's (more than 10% of the ${leaseMs} ms lease of '${jobName}'); its scheduler fires at the wrong ` +
      'moments, which the lease cannot correct: fix its time sync (NTP)',
  )
}
