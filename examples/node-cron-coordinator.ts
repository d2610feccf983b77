/**
 * node-cron 4 in distributed mode, with pg-cron-lease as its run coordinator: node-cron asks the
 * coordinator before each fire, and only the replica that wins the lease runs the task. The key
 * node-cron asks with names the fire's slot, and the coordinator claims that occurrence.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/node-cron-coordinator.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran". It stops by itself
 * after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM.
 */
import cron from 'node-cron'
import pg from 'pg'
import {
  CRON_LEASES_TABLE_SQL,
  drainLeases,
  leaseCoordinator,
  leaseForInterval,
} from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
// Once at startup is enough (or create the table in a migration: see examples/migration.ts).
await pool.query(CRON_LEASES_TABLE_SQL)

let runs = 0
const coordinator = leaseCoordinator(pool)
const task = cron.schedule(
  '* * * * * *',
  (ctx) => {
    console.log(`ran example:node-cron-coordinator #${++runs} for ${ctx.date.toISOString()}`)
  },
  {
    // The lease is claimed on this name, so every replica must use the same one.
    name: 'example:node-cron-coordinator',
    distributed: true,
    // node-cron passes this to the coordinator as the lease length. It must be shorter than the
    // second between fires: node-cron's default, 30 s, would skip 29 fires of every 30.
    distributedLease: leaseForInterval(1000),
    runCoordinator: coordinator,
  },
)
// node-cron does not tell a coordinator whether the task threw: a watched task's runs are
// recorded ok, or error with the error's first line (an unwatched run has no outcome). Watched,
// the task also tells each claim when it runs next (getNextRun()): the job's next due time.
coordinator.watch(task)
task.on('execution:skipped', (ctx) => {
  if (ctx.reason === 'coordinator-error')
    console.error('claim failed; this fire was skipped', ctx.error)
})

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    await task.destroy()
    // No claim from here on; waits for the fires in flight, each until its onComplete,
    // recording those still going after 10 s as errors.
    await drainLeases()
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
