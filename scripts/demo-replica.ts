/**
 * One replica of `npm run demo`. Like every replica of a real service, it schedules the same
 * every-second job with node-cron; each fire first waits a random drift (timers on different
 * machines fire late by different amounts: load, GC pauses, clock error), then runs the tick the
 * way the demo's current mode says, and reports the occurrence to the demo over IPC.
 *
 * With `--dashboard`, the demo then hands every replica a scene: jobs it keeps running, each
 * occurrence claimed by its scheduled time, until it is stopped, with a few occurrences set aside
 * for what a dashboard is there to show: one nobody fires (a miss), one whose tick throws, and one
 * whose tick is still running when the demo kills the replica that won it.
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
 * One job of a {@link Scene}, claimed every second by occurrence; the occurrences (epoch seconds)
 * set aside for its incidents.
 *
 * @example
 * const job: SceneJob = { jobName: 'demo:incidents', missed: [first + 4], failing: [first + 6], dying: [first + 8] }
 */
export interface SceneJob {
  jobName: string
  /** No replica fires for these, as when every replica is down or stalled: the next claim counts each missed. */
  missed: number[]
  /** The tick throws: the run is recorded as an error, with the message. */
  failing: number[]
  /** The tick says it started and then waits; the demo kills (SIGKILL) the replica that runs it. */
  dying: number[]
}

/**
 * The jobs every replica runs from the occurrence `first` on, until it is stopped.
 *
 * @example
 * const scene: Scene = { first, table: 'cron_leases', driftMs: 150, tickMs: 50, jobs: [{ jobName: 'demo:lease', missed: [], failing: [], dying: [] }] }
 */
export interface Scene {
  first: number
  table: string
  driftMs: number
  tickMs: number
  jobs: SceneJob[]
}

/**
 * What a replica reports for each occurrence of a scene's job that it fired for: `running` once a
 * won tick has started (for the dying occurrences only), then how its call ended, unless it died.
 *
 * @example
 * process.send?.({ type: 'scene', jobName: 'demo:lease', slot, replica: 1, state: 'ran' } satisfies SceneReport)
 */
export interface SceneReport {
  type: 'scene'
  jobName: string
  slot: number
  replica: number
  state: 'running' | 'ran' | 'skipped' | 'error'
  error?: string
}

/** What a failing occurrence's tick throws: what a report job meets on a bad night. */
export const SCENE_ERROR = 'the report service answered 503 Service Unavailable'

/**
 * Messages from the demo to a replica.
 *
 * @example
 * child.send({ type: 'stop' } satisfies ToReplica)
 */
export type ToReplica = { type: 'plan'; plan: Plan } | { type: 'scene'; scene: Scene } | { type: 'stop' }
/**
 * Messages from a replica to the demo.
 *
 * @example
 * child.on('message', (m: FromReplica) => m.type === 'ready' && started++)
 */
export type FromReplica = { type: 'ready'; replica: number } | TickReport | SceneReport

const replica = Number(process.env.DEMO_REPLICA)
// The pool is shared by the modes; the advisory pattern keeps one of its connections for the tick.
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 3 })
pool.on('error', () => {})
let plan: Plan | undefined
let scene: Scene | undefined
let stopping = false
// The scene's fires in progress in this replica, from the fire to the recorded outcome.
let firing = 0

const task = cron.schedule(
  '* * * * * *',
  (ctx) => {
    const slot = Math.round(ctx.date.getTime() / 1000)
    void onFire(slot)
    const current = scene
    if (current) for (const job of current.jobs) void onSceneFire(current, job, slot)
  },
  { suppressMissedWarning: true },
)

async function onFire(slot: number): Promise<void> {
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
      // The library: the lease lasts 80% of the interval and is never released early, and the
      // claim names the occurrence, so however late a replica fires, no occurrence runs twice.
      ran = (
        await withCronLease(pool, current.jobName, leaseForInterval(1000), tick, {
          table: current.table,
          holder: `replica-${replica}`,
          ...occurrenceOf(slot),
        })
      ).ran
    }
    send({ type: 'tick', slot, replica, ran })
  } catch (error) {
    send({ type: 'tick', slot, replica, ran: false, error: (error as Error).message })
  }
}

/** One occurrence of a scene's job, claimed as in the lease mode; its tick as the scene says. */
async function onSceneFire(current: Scene, job: SceneJob, slot: number): Promise<void> {
  if (stopping || slot < current.first || job.missed.includes(slot)) return
  firing++
  try {
    await sleep(Math.random() * current.driftMs)
    const report = (state: SceneReport['state'], error?: string) =>
      send({ type: 'scene', jobName: job.jobName, slot, replica, state, ...(error === undefined ? {} : { error }) })
    const tick = async () => {
      if (job.dying.includes(slot)) {
        // The kill is for this run alone: the replica's other jobs of this second settle (and
        // record) first, or the healthy job would lose a run to it too.
        while (firing > 1) await sleep(10)
        report('running')
        // Far longer than the demo takes to kill this process: the run never ends on its own.
        await sleep(60_000)
      }
      await sleep(current.tickMs)
      if (job.failing.includes(slot)) throw new Error(SCENE_ERROR)
    }
    try {
      const { ran } = await withCronLease(pool, job.jobName, leaseForInterval(1000), tick, {
        table: current.table,
        holder: `replica-${replica}`,
        ...occurrenceOf(slot),
      })
      report(ran ? 'ran' : 'skipped')
    } catch (error) {
      report('error', (error as Error).message)
    }
  } finally {
    firing--
  }
}

/** The occurrence a fire is for, and the next, as a cron recipe names them (docs/schedulers.md). */
function occurrenceOf(slot: number): { occurrence: Date; nextOccurrence: Date } {
  return { occurrence: new Date(slot * 1000), nextOccurrence: new Date((slot + 1) * 1000) }
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
  else if (message.type === 'scene') scene = message.scene
  else if (message.type === 'stop') void stop()
})
// The demo is gone (it crashed or was killed): a replica never outlives it.
process.on('disconnect', () => void stop())
process.on('SIGINT', () => void stop())
process.on('SIGTERM', () => void stop())

await pool.query('SELECT 1')
send({ type: 'ready', replica })
