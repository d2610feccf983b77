/**
 * Preload (`node --import ./dev/skew-clock.ts`) that moves this process's wall clock by
 * `SKEW_MS` milliseconds, the way a replica with a wrong clock sees time: `Date` and
 * `Date.now()` are shifted; the database clock is not. Used to prove the lease never trusts it.
 */
const skew = Number(process.env.SKEW_MS ?? 0)

if (!Number.isFinite(skew)) throw new Error(`SKEW_MS must be a number, got ${process.env.SKEW_MS}`)
if (skew !== 0) installSkew(skew)

export function installSkew(ms: number): () => void {
  const RealDate = Date
  const realNow = RealDate.now.bind(RealDate)
  class SkewedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(realNow() + ms)
      else super(...(args as [string]))
    }
    static override now() {
      return realNow() + ms
    }
  }
  globalThis.Date = SkewedDate as DateConstructor
  return () => {
    globalThis.Date = RealDate
  }
}
