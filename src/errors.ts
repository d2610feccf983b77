/**
 * The errors the library defines itself. Everything else it rejects with is a TypeError (a bad
 * argument) or the driver's own error, unchanged.
 */

/**
 * What `ctx.fence(client)` rejects with when another claim has replaced this tick's claim: the
 * lease was taken over, and the other claim's tick may be running. Whatever the caller wrote in
 * that transaction must not commit, so roll it back. `code` is always `'PG_CRON_LEASE_LOST'`, for
 * code that tells errors apart by their code; `jobName` and `claimToken` name the claim that was
 * lost. Nothing was written by the library, and the caller's transaction is not left aborted.
 *
 * @example
 * import { LeaseLostError } from 'pg-cron-lease'
 *
 * await client.query('BEGIN')
 * try {
 *   await ctx.fence(client)
 *   await client.query('INSERT INTO reports (day) VALUES ($1)', [day])
 *   await client.query('COMMIT')
 * } catch (error) {
 *   await client.query('ROLLBACK')
 *   if (!(error instanceof LeaseLostError)) throw error // else: another claim runs the job now
 * }
 */
export class LeaseLostError extends Error {
  override readonly name = 'LeaseLostError'
  /** Always `'PG_CRON_LEASE_LOST'`. */
  readonly code = 'PG_CRON_LEASE_LOST'
  /** The job whose lease was lost. */
  readonly jobName: string
  /** The lost claim's token (`ctx.claimToken`). */
  readonly claimToken: string

  constructor(jobName: string, claimToken: string) {
    super(
      `pg-cron-lease: the lease for '${jobName}' was lost: another claim has replaced claim ${claimToken}; ` +
        'roll the transaction back, so that nothing it wrote commits',
    )
    this.jobName = jobName
    this.claimToken = claimToken
  }
}
