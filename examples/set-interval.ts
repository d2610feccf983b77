/**
 * setInterval with leasedTick. A bare async callback that rejects inside setInterval is an
 * unhandled rejection, which ends the process; the wrapper never rejects (errors go to onError).
 * setInterval names no occurrence, so forInterval declares the interval with the lease: the
 * winner stores the job as next due one interval on, and the next claim counts what was missed.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/set-interval.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM.
 */
import pg from 'pg'
import { CRON_LEASES_TABLE_SQL, drainLeases, forInterval, leasedTick } from 'pg-cron-lease'

const INTERVAL_MS = 1000
const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

let runs = 0
const tick = leasedTick(pool, 'example:set-interval', forInterval(INTERVAL_MS), (ctx) => {
  console.log(`ran example:set-interval #${++runs} (missed ${ctx.missed})`)
})
const timer = setInterval(tick, INTERVAL_MS)

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    clearInterval(timer)
    // No claim from here on; waits for the ticks in flight (a catch-up too), aborting them after 10 s.
    await drainLeases()
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
