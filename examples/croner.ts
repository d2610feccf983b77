/**
 * croner with leasedTick: the wrapper claims the lease, runs the tick on the winning replica, and
 * never rejects (errors go to onError).
 *
 *   DATABASE_URL=postgres://... npx tsx examples/croner.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000).
 */
import { Cron } from 'croner'
import pg from 'pg'
import { CRON_LEASES_TABLE_SQL, leasedTick, leaseForInterval } from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

let runs = 0
const job = new Cron(
  '* * * * * *',
  leasedTick(
    pool,
    'example:croner',
    leaseForInterval(1000),
    () => {
      console.log(`ran example:croner #${++runs}`)
    },
    { onError: (error, jobName) => console.error(`${jobName} failed`, error) },
  ),
)

setTimeout(async () => {
  job.stop()
  await pool.end()
  console.log(`stopped after ${runs} runs`)
}, durationMs)
