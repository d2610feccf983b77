/**
 * node-cron with a plain callback that calls withCronLease: the tick runs inside the lease, so it
 * gets a context (ctx.renew(), ctx.signal) for work that may outlast the lease.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/node-cron-callback.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000).
 */
import cron from 'node-cron'
import pg from 'pg'
import { CRON_LEASES_TABLE_SQL, leaseForInterval, withCronLease } from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

let runs = 0
// node-cron catches a rejected callback and logs it (its 'execution:failed' event), so the
// promise withCronLease returns can be handed back to it as is.
const task = cron.schedule('* * * * * *', () =>
  withCronLease(pool, 'example:node-cron-callback', leaseForInterval(1000), async (ctx) => {
    console.log(`ran ${ctx.jobName} #${++runs} (claim ${ctx.claimToken})`)
  }),
)

setTimeout(async () => {
  await task.destroy()
  await pool.end()
  console.log(`stopped after ${runs} runs`)
}, durationMs)
