/**
 * croner with leasedTick: the wrapper claims the lease, runs the tick on the winning replica, and
 * never rejects (errors go to onError). croner passes the job to its callback, and the wrapper reads
 * from it which occurrence each fire is for, and when the next one is.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/croner.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM.
 */
import { Cron } from 'croner'
import pg from 'pg'
import { CRON_LEASES_TABLE_SQL, leasedTick, leaseForInterval } from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

// The ticks still running. job.stop() stops new fires only, and a running tick still claims and
// records its outcome through the pool: shutdown waits for these before it ends the pool.
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
const tick = leasedTick(
  pool,
  'example:croner',
  leaseForInterval(1000),
  (ctx) => {
    console.log(
      `ran example:croner #${++runs} for ${ctx.occurrence?.toISOString()} (missed ${ctx.missed})`,
    )
  },
  {
    // Opt in: when the wrapper is made, if the whole fleet was down when the job fell due, less
    // than a minute ago, one replica runs it once, in the background, for the latest occurrence due.
    catchUp: { withinMs: 60_000 },
    onError: (error, jobName) => console.error(`${jobName} failed`, error),
  },
)
// The catch-up runs in the background: shutdown waits for it as for any tick.
const caughtUp = tick.caughtUp
inFlight.add(caughtUp)
void caughtUp.then(() => inFlight.delete(caughtUp))
const job = new Cron('* * * * * *', tracked(tick))

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    job.stop()
    while (inFlight.size > 0) await Promise.allSettled(inFlight)
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
