import { publishClaim, traceTick } from './channels.js'
import { monotonicMs, openContext } from './context.js'
import { runStatement } from './query.js'
import { readResult } from './result.js'
import { claimSql } from './sql.js'
import type { LeaseContext, LeaseLogger, LeaseOptions, LeaseOutcome, Queryable } from './types.js'
import { checkLeaseArgs } from './validate.js'

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
 * rejects unchanged and keeps the lease.
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
export async function withCronLease<T>(
  db: Queryable,
  jobName: string,
  leaseMs: number,
  runTick: (ctx: LeaseContext) => Promise<T> | T,
  opts?: LeaseOptions,
): Promise<LeaseOutcome<T>> {
  const { leaseMs: ms, holder, table, logger, keepAlive, prepare } = checkLeaseArgs(db, jobName, leaseMs, runTick, opts)

  const { won, claimToken, sentAt } = await claim({ db, table, jobName, leaseMs: ms, holder, logger, prepare })
  if (!won) return { ran: false, result: null }
  if (keepAlive && claimToken === null) {
    throw new TypeError(
      `pg-cron-lease: keepAlive cannot fence the lease for '${jobName}': the claim's result had no row to read ` +
        'its claim token from; the lease is held until it expires and the tick did not run',
    )
  }

  const { ctx, close } = openContext(
    { db, table, jobName, holder, leaseMs: ms, claimToken, sentAt, prepare },
    keepAlive,
  )
  try {
    const result = await traceTick(
      () => runTick(ctx),
      () => ({ jobName, holder, claimToken, leaseMs: ms }),
    )
    return { ran: true, result }
  } finally {
    close()
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

/**
 * The claim step on its own: one statement, its result read, the outcome published. Shared by
 * withCronLease and leaseCoordinator (which runs no tick itself), so there is one claim path.
 * Arguments must already be validated. A driver error or an unreadable result rejects.
 */
export async function claim(
  request: ClaimRequest,
): Promise<{ won: boolean; claimToken: string | null; sentAt: number }> {
  const { db, table, jobName, leaseMs, holder, logger, prepare } = request
  const sentAt = monotonicMs()
  const { won, claimToken } = readResult(
    await runStatement(db, claimSql(table), [jobName, leaseMs, holder], prepare),
    jobName,
    'claimed',
  )
  publishClaim(() => ({ jobName, holder, won, claimToken }))
  if (!won) logger?.debug?.(`pg-cron-lease: '${jobName}' skipped: lease held by another replica`)
  return { won, claimToken, sentAt }
}
