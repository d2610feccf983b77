/** The `code` of each error the library raises; any other error is the driver's. Choose behaviour by code, not text. */
export const ERROR_CODES = Object.freeze({
  /** A bad argument or option (a `TypeError` naming it in `argument`), found before any query. */
  INVALID_ARGUMENT: 'ERR_INVALID_ARG_VALUE',
  /** `ctx.fence()`: another claim replaced this one (a {@link LeaseLostError}). */
  LEASE_LOST: 'PG_CRON_LEASE_LOST',
  /** `pauseJob`, `resumeJob`, `releaseLease`: the job's row stayed locked past `lockTimeoutMs`. */
  ROW_LOCKED: 'PG_CRON_LEASE_ROW_LOCKED',
  /** `listRuns`: the table has no run history (`pg-cron-lease migrate` adds it). */
  NO_HISTORY: 'PG_CRON_LEASE_NO_HISTORY',
} as const)

/**
 * What `ctx.fence(client)` rejects with once another claim replaced this one: roll back (it is not left aborted).
 * @example
 * if (!(error instanceof LeaseLostError)) throw error // else: another claim runs the job now
 */
export class LeaseLostError extends Error {
  override readonly name = 'LeaseLostError'
  readonly code = ERROR_CODES.LEASE_LOST
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

/** A bad argument: `argument` as the caller wrote it (`opts.until`), `detail` what it must be and what it got. */
export interface ArgumentError extends TypeError {
  readonly code: typeof ERROR_CODES.INVALID_ARGUMENT
  readonly argument: string
  readonly detail: string
}

export function argumentError(argument: string, detail: string): ArgumentError {
  const error = new TypeError(`pg-cron-lease: ${argument} ${detail}`)
  return Object.assign(error, { code: ERROR_CODES.INVALID_ARGUMENT, argument, detail } as const)
}

export function codedError(code: string, message: string, cause?: unknown): Error & { code: string } {
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code })
}
