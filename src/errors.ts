/** The library's own errors; else a TypeError (bad argument) or the driver's error, unchanged. */

/**
 * What `ctx.fence(client)` rejects with once another claim replaced this one: roll back. `code` is
 * `'PG_CRON_LEASE_LOST'`; the caller's transaction is not left aborted.
 *
 * @example
 * if (!(error instanceof LeaseLostError)) throw error // else: another claim runs the job now
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
