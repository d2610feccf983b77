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
import { CRON_LEASES_TABLE_SQL, drainLeases, leasedTick, leaseForInterval } from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

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
const job = new Cron('* * * * * *', tick)

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    job.stop()
    // No claim from here on; waits for the ticks in flight (a catch-up too), aborting them after 10 s.
    await drainLeases()
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
