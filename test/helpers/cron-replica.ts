/**
 * One replica as its own process, for the multi-process scheduler tests: a node-cron 4 task that
 * fires every second, coordinated by `leaseCoordinator`, whose body records a run. Run it with
 * `node --import tsx [--import ./dev/skew-clock.ts] test/helpers/cron-replica.ts`.
 *
 * Environment: DATABASE_URL, LEASE_TABLE, RUNS_TABLE, JOB, HOLDER, LEASE_MS.
 * Prints one JSON line `{"ready":true,"now":...}` once scheduled, one `{"firstKey":...}` at its
 * first fire, and `{"done":true,...}` at the end. It stops when its stdin closes.
 */
import cron from 'node-cron'
import pg from 'pg'
import { leaseCoordinator, listLeases } from '../../src/index.ts'
import { recordRun } from './occurrences.ts'

const env = (name: string) => {
  const value = process.env[name]
  if (!value) throw new Error(`cron-replica needs ${name}`)
  return value
}

const runsTable = env('RUNS_TABLE')
const holder = env('HOLDER')
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 2 })
const coordinator = leaseCoordinator(pool, { table: env('LEASE_TABLE'), holder })
// The table's shape is read and both connections are open before the first fire, as in a replica
// that has been running: done inside the first claim, on a loaded machine, they made it late enough
// for its lease to outlast the next fire, which was then (rightly) missed.
await Promise.all([listLeases(pool, { table: env('LEASE_TABLE') }), pool.query('SELECT 1')])
const inFlight = new Set<Promise<unknown>>()
let asked = 0
let won = 0
let errors = 0

const task = cron.schedule(
  '* * * * * *',
  () => {
    const run = recordRun(pool, runsTable, holder)
    inFlight.add(run)
    return run.finally(() => inFlight.delete(run))
  },
  {
    name: env('JOB'),
    distributed: true,
    distributedLease: Number(env('LEASE_MS')),
    runCoordinator: {
      async shouldRun(key, ttlMs) {
        if (asked++ === 0) console.log(JSON.stringify({ firstKey: key }))
        const claim = coordinator.shouldRun(key, ttlMs)
        inFlight.add(claim)
        try {
          const result = await claim
          if (result) won++
          return result
        } catch (error) {
          errors++
          throw error
        } finally {
          inFlight.delete(claim)
        }
      },
      onComplete: (key) => coordinator.onComplete(key),
    },
  },
)
console.log(JSON.stringify({ ready: true, now: new Date().toISOString() }))

process.stdin.resume()
process.stdin.on('end', async () => {
  await task.destroy()
  // node-cron calls the body after shouldRun resolves, so give a won claim time to start its body.
  await new Promise((resolve) => setTimeout(resolve, 300))
  while (inFlight.size > 0) await Promise.allSettled([...inFlight])
  await pool.end()
  console.log(JSON.stringify({ done: true, holder, asked, won, errors }))
  process.stdin.pause()
})
