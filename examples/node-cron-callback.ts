/**
 * node-cron with a plain callback that calls withCronLease: the tick runs inside the lease, so it
 * gets a context (ctx.renew(), ctx.signal) for work that may outlast the lease.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/node-cron-callback.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM.
 */
import cron from 'node-cron'
import pg from 'pg'
import { CRON_LEASES_TABLE_SQL, leaseForInterval, withCronLease } from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

// The ticks still running. task.destroy() stops new fires only, and a running tick still claims
// and records its outcome through the pool: shutdown waits for these before it ends the pool.
const inFlight = new Set<Promise<unknown>>()
function tracked<A extends unknown[], R>(fn: (...args: A) => Promise<R>) {
  return (...args: A): Promise<R> => {
    const tick = fn(...args)
    inFlight.add(tick)
    const forget = () => inFlight.delete(tick)
    tick.then(forget, forget)
    return tick
  }
}

let runs = 0
// node-cron catches a rejected callback and logs it (its 'execution:failed' event), so the
// promise withCronLease returns can be handed back to it as is.
const task = cron.schedule(
  '* * * * * *',
  tracked(() =>
    withCronLease(pool, 'example:node-cron-callback', leaseForInterval(1000), async (ctx) => {
      console.log(`ran ${ctx.jobName} #${++runs} (claim ${ctx.claimToken})`)
    }),
  ),
)

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    await task.destroy()
    while (inFlight.size > 0) await Promise.allSettled(inFlight)
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
