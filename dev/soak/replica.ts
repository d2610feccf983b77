/**
 * One replica of the soak, run as its own process (`node --import tsx dev/soak/replica.ts`) with
 * its own pool. It schedules every job the way a cron library does, from its own wall clock: the
 * next multiple of the interval, then a random drift of up to `driftFraction` of the interval. When
 * its clock is skewed (the skew-clock preload) it fires at another phase, as a real replica would.
 *
 * Each tick that wins records itself in the history table before doing anything else, does a
 * little work, may throw once per job (the first tick of the job to reach its planned throw time),
 * and marks its outcome. A replica killed mid-tick leaves its row with no outcome.
 *
 * Configuration comes in `SOAK_CONFIG` (JSON, see ReplicaConfig). On SIGTERM it stops firing,
 * waits for its running ticks, prints one JSON line with its counters and exits.
 */
import pg from 'pg'
import { withCronLease } from '../../src/index.ts'
import type { JobSpec } from './check.ts'

export interface ReplicaConfig {
  url: string
  /** Lease table, history table and throw-plan table. */
  table: string
  history: string
  plan: string
  holder: string
  jobs: JobSpec[]
  /** Each fire is delayed by a random fraction of the interval in [0, driftFraction). */
  driftFraction: number
  /** Each tick works for a random time in [0, workMs). */
  workMs: number
}

/** The error a tick throws when it takes its job's planned throw. */
class PlannedThrow extends Error {}

const config = JSON.parse(process.env.SOAK_CONFIG ?? 'null') as ReplicaConfig | null
if (!config) throw new Error('SOAK_CONFIG is not set')

// The skew-clock preload moves Date; move performance.now by the same amount, so neither of the
// process's clocks agrees with the database.
const skew = Number(process.env.SKEW_MS ?? 0)
if (skew !== 0) {
  const realNow = performance.now.bind(performance)
  Object.defineProperty(performance, 'now', { value: () => realNow() + skew, configurable: true })
}

const { holder, table, history, plan, jobs, driftFraction, workMs } = config
const pool = new pg.Pool({ connectionString: config.url, max: 10 })
pool.on('error', () => {}) // an idle client dropped by the server: the next query reconnects
const counters = { holder, fires: 0, won: 0, lost: 0, threw: 0, errors: 0 }
const timers = new Map<string, NodeJS.Timeout>()
const running = new Set<Promise<unknown>>()
let stopping = false

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function tick(job: JobSpec, claimToken: string | null): Promise<void> {
  const { rows } = await pool.query(
    `INSERT INTO "${history}" (job, holder, claimed_at) VALUES ($1, $2, ($3::text)::timestamptz) RETURNING id`,
    [job.name, holder, claimToken],
  )
  const id = rows[0].id
  await sleep(Math.random() * workMs)
  // Taking the planned throw and recording the outcome is one statement, so a kill cannot leave a
  // throw taken but not recorded.
  const { rows: marked } = await pool.query(
    `WITH taken AS (
       UPDATE "${plan}" SET taken_by = $2 WHERE job = $1 AND taken_by IS NULL AND at <= clock_timestamp() RETURNING job)
     UPDATE "${history}" SET outcome = CASE WHEN EXISTS (SELECT 1 FROM taken) THEN 'threw' ELSE 'ran' END,
       finished_at = clock_timestamp()
     WHERE id = $3 RETURNING outcome`,
    [job.name, holder, id],
  )
  const outcome = marked[0].outcome
  if (outcome === 'threw') throw new PlannedThrow(`planned throw of ${job.name}`)
}

function fire(job: JobSpec) {
  counters.fires++
  const done = withCronLease(pool, job.name, job.leaseMs, (ctx) => tick(job, ctx.claimToken), { table, holder }).then(
    (outcome) => void (outcome.ran ? counters.won++ : counters.lost++),
    (error) => {
      if (error instanceof PlannedThrow) counters.threw++
      else {
        counters.errors++
        console.error(`${holder} ${job.name}: ${String(error)}`)
      }
    },
  )
  running.add(done)
  void done.finally(() => running.delete(done))
}

// The slot last fired per job: a timer may wake a little before the wall clock reaches the slot,
// and must not fire that slot twice.
const lastSlot = new Map<string, number>()

function schedule(job: JobSpec) {
  if (stopping) return
  const now = Date.now()
  const slot = Math.max(Math.floor(now / job.intervalMs) + 1, (lastSlot.get(job.name) ?? 0) + 1)
  lastSlot.set(job.name, slot)
  const delay = slot * job.intervalMs - now + Math.random() * driftFraction * job.intervalMs
  timers.set(
    job.name,
    setTimeout(() => {
      fire(job)
      schedule(job)
    }, delay),
  )
}

async function stop() {
  stopping = true
  for (const timer of timers.values()) clearTimeout(timer)
  await Promise.race([Promise.allSettled([...running]), sleep(10_000)])
  await pool.end()
  process.stdout.write(`${JSON.stringify({ stopped: counters })}\n`)
  process.exit(0)
}

process.once('SIGTERM', () => void stop())
await pool.query('SELECT 1')
for (const job of jobs) schedule(job)
process.stdout.write(`${JSON.stringify({ ready: holder })}\n`)
