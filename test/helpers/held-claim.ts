/**
 * A claim whose tick keeps running until the test releases it, handing out its context, so a test
 * can renew from a tick that is still running at a moment of its choosing.
 */
import { type LeaseContext, type LeaseOptions, type Queryable, withCronLease } from '../../src/index.ts'

/** Claims `jobName` and resolves once the tick runs; rejects if the claim lost. */
export async function holdClaim(db: Queryable, jobName: string, leaseMs: number, opts: LeaseOptions) {
  let release!: () => void
  const released = new Promise<void>((resolve) => {
    release = resolve
  })
  const ctx = await new Promise<LeaseContext>((resolve, reject) => {
    withCronLease(
      db,
      jobName,
      leaseMs,
      (c) => {
        resolve(c)
        return released
      },
      opts,
    ).then((outcome) => outcome.ran || reject(new Error(`the claim of ${jobName} lost`)), reject)
  })
  return { ctx, release }
}
