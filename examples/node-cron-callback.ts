/**
 * node-cron with a plain callback that calls withCronLease: the tick runs inside the lease, so it
 * gets a context (ctx.renew(), ctx.signal) for work that may outlast the lease. The claim names the
 * occurrence node-cron fires for, so no replica runs it twice, however late its timer fires.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/node-cron-callback.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM.
 */
import cron, { type TaskContext } from 'node-cron'
import pg from 'pg'
import {
  CRON_LEASES_TABLE_SQL,
  catchUp,
  drainLeases,
  type LeaseContext,
  leaseForInterval,
  withCronLease,
} from 'pg-cron-lease'

const JOB = 'example:node-cron-callback'
const LEASE_MS = leaseForInterval(1000)
const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

let runs = 0
function report(ctx: LeaseContext) {
  console.log(
    `ran ${ctx.jobName} #${++runs} for ${ctx.occurrence?.toISOString()} (missed ${ctx.missed})`,
  )
}

// node-cron 4 passes each fire its context: ctx.date is the slot the fire is for, computed from
// the schedule (so every replica names the same one), and getNextRun() is when this replica fires
// next, which the winner stores as the job's next due time. node-cron catches a rejected callback
// and logs it (its 'execution:failed' event), so the promise can be handed back to it as is.
const task = cron.schedule('* * * * * *', (ctx: TaskContext) =>
  withCronLease(pool, JOB, LEASE_MS, report, {
    occurrence: ctx.date,
    nextOccurrence: ctx.task?.getNextRun(),
  }),
)

// Opt in, at start: if the whole fleet was down when the job fell due, less than a minute ago, one
// replica runs it once now, for the latest occurrence due (ctx.occurrence; ctx.missed counts the
// earlier ones, which are skipped). A fresh job, never claimed, has nothing to catch up.
catchUp(pool, JOB, LEASE_MS, report, {
  withinMs: 60_000,
  nextOccurrence: task.getNextRun(),
}).catch((error: unknown) => console.error(`${JOB}: catch-up failed`, error))

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    await task.destroy()
    // No claim from here on; waits for the ticks in flight (a catch-up too), aborting them after 10 s.
    await drainLeases()
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
