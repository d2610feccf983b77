/**
 * setInterval with leasedTick. A bare async callback that rejects inside setInterval is an
 * unhandled rejection, which ends the process; the wrapper never rejects (errors go to onError).
 *
 *   DATABASE_URL=postgres://... npx tsx examples/set-interval.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000).
 */
import pg from 'pg'
import { CRON_LEASES_TABLE_SQL, leasedTick, leaseForInterval } from 'pg-cron-lease'

const INTERVAL_MS = 1000
const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

let runs = 0
const tick = leasedTick(pool, 'example:set-interval', leaseForInterval(INTERVAL_MS), () => {
  console.log(`ran example:set-interval #${++runs}`)
})
const timer = setInterval(tick, INTERVAL_MS)

setTimeout(async () => {
  clearInterval(timer)
  await pool.end()
  console.log(`stopped after ${runs} runs`)
}, durationMs)
