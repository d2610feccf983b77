/**
 * A claim whose tick keeps running until the test releases it, handing out its context, so a test
 * can renew from a tick that is still running at a moment of its choosing (a context kept past
 * its tick cannot renew at all).
 */
import {
  type LeaseContext,
  type LeaseOptions,
  type LeaseOutcome,
  type Queryable,
  withCronLease,
} from '../../src/index.ts'

export interface HeldClaim {
  ctx: LeaseContext
  /** Lets the tick return; `outcome` then settles. */
  release(): void
  outcome: Promise<LeaseOutcome<void>>
}

/** Claims `jobName`; resolves once the tick runs, or null when the claim lost. */
export async function tryHoldClaim(
  db: Queryable,
  jobName: string,
  leaseMs: number,
  opts: LeaseOptions,
): Promise<HeldClaim | null> {
  let release!: () => void
  const released = new Promise<void>((resolve) => {
    release = resolve
  })
  let started!: (ctx: LeaseContext) => void
  const ran = new Promise<LeaseContext>((resolve) => {
    started = resolve
  })
  const outcome = withCronLease(
    db,
    jobName,
    leaseMs,
    (ctx) => {
      started(ctx)
      return released
    },
    opts,
  )
  const ctx = await Promise.race([ran, outcome.then(() => null)])
  return ctx ? { ctx, release, outcome } : null
}

/** Claims `jobName` and resolves once the tick runs; rejects if the claim lost. */
export async function holdClaim(db: Queryable, jobName: string, leaseMs: number, opts: LeaseOptions) {
  const held = await tryHoldClaim(db, jobName, leaseMs, opts)
  if (!held) throw new Error(`the claim of ${jobName} lost`)
  return held
}
