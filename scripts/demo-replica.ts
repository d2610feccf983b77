/**
 * One replica of `npm run demo`. Like every replica of a real service, it schedules the same
 * every-second job with node-cron; each fire first waits a random drift (timers on different
 * machines fire late by different amounts: load, GC pauses, clock error), then runs the tick the
 * way the demo's current mode says, and reports the occurrence to the demo over IPC.
 *
 * Started by scripts/demo.ts with DATABASE_URL, DEMO_REPLICA (its number) and an IPC channel.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import cron from 'node-cron'
import pg from 'pg'
import type { Mode } from '../dev/demo-view.ts'
import { advisoryTick } from '../dev/peers.ts'
import { leaseForInterval, withCronLease } from '../src/index.ts'

/**
 * What the demo asks the replicas to do for the occurrences `first`..`last` (epoch seconds).
 *
 * @example
 * const plan: Plan = { mode: 'lease', first, last: first + 9, jobName: 'demo:lease', table: 'cron_leases', driftMs: 150, tickMs: 50 }
 */
export interface Plan {
  mode: Mode
  first: number
  last: number
  jobName: string
  table: string
  driftMs: number
  tickMs: number
}

/**
 * What a replica reports for each occurrence in the plan.
 *
 * @example
 * process.send?.({ type: 'tick', slot, replica: 1, ran: true } satisfies TickReport)
 */
export interface TickReport {
  type: 'tick'
  slot: number
  replica: number
  ran: boolean
  error?: string
}

/**
 * Messages from the demo to a replica.
 *
 * @example
 * child.send({ type: 'stop' } satisfies ToReplica)
 */
export type ToReplica = { type: 'plan'; plan: Plan } | { type: 'stop' }
/**
 * Messages from a replica to the demo.
 *
 * @example
 * child.on('message', (m: FromReplica) => m.type === 'ready' && started++)
 */
export type FromReplica = { type: 'ready'; replica: number } | TickReport

const replica = Number(process.env.DEMO_REPLICA)
// The pool is shared by the modes; the advisory pattern keeps one of its connections for the tick.
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 3 })
pool.on('error', () => {})
let plan: Plan | undefined
let stopping = false

const task = cron.schedule('* * * * * *', (ctx) => onFire(ctx.date), { suppressMissedWarning: true })

async function onFire(date: Date): Promise<void> {
  const slot = Math.round(date.getTime() / 1000)
  const current = plan
  if (stopping || !current || slot < current.first || slot > current.last) return
  await sleep(Math.random() * current.driftMs)
  const tick = () => sleep(current.tickMs)
  try {
    let ran: boolean
    if (current.mode === 'none') {
      await tick()
      ran = true
    } else if (current.mode === 'advisory') {
      ran = (await advisoryTick(pool, current.jobName, tick)).ran
    } else {
      // The library: the lease lasts 80% of the interval and is never released early.
      ran = (
        await withCronLease(pool, current.jobName, leaseForInterval(1000), tick, {
          table: current.table,
          holder: `replica-${replica}`,
        })
      ).ran
    }
    send({ type: 'tick', slot, replica, ran })
  } catch (error) {
    send({ type: 'tick', slot, replica, ran: false, error: (error as Error).message })
  }
}

function send(message: FromReplica): void {
  if (process.connected) process.send?.(message)
}

async function stop(): Promise<void> {
  if (stopping) return
  stopping = true
  await task.stop()
  await pool.end().catch(() => {})
  process.disconnect?.()
  process.exit(0)
}

process.on('message', (message: ToReplica) => {
  if (message.type === 'plan') plan = message.plan
  else if (message.type === 'stop') void stop()
})
// The demo is gone (it crashed or was killed): a replica never outlives it.
process.on('disconnect', () => void stop())
process.on('SIGINT', () => void stop())
process.on('SIGTERM', () => void stop())

await pool.query('SELECT 1')
send({ type: 'ready', replica })
