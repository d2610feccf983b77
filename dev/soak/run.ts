/**
 * The soak: several replica processes fire several jobs against one lease table for a while, under
 * drift, a replica whose clock is hours off, a replica SIGKILLed and restarted, and one planned
 * throw per job; then the recorded history is checked (see check.ts).
 *
 * Used by `npm run soak`, by the short profile in the integration suite, and through PgBouncer.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { createTableSql, leaseForInterval } from '../../src/index.ts'
import { checkHistory, type JobSpec, type KillRecord, type RunRecord, type SoakReport } from './check.ts'
import type { ReplicaConfig } from './replica.ts'

/** Five jobs with second-level intervals, each with the lease `leaseForInterval` gives. */
const DEFAULT_INTERVALS_MS = [1000, 1500, 2000, 2500, 3000]

/**
 * Three hours and 150 ms ahead: besides being hours off, the skewed replica reaches each multiple
 * of an interval 150 ms before the others (three hours is a whole number of every default
 * interval), so it fires 5-15% of the interval earlier. It wins most occurrences, and the others
 * win when its drift is large: the runs alternate between two phases.
 */
const DEFAULT_SKEW_MS = 3 * 3600_000 + 150

export interface SoakOptions {
  /** Where the replicas connect (the server, or PgBouncer in front of it). */
  url: string
  /** Where the soak creates, reads and drops its tables; defaults to `url`. */
  adminUrl?: string
  /** How long the replicas run once all are up. */
  seconds: number
  /** At least 3: one is skewed, one is killed and restarted, the others are plain. */
  replicas: number
  intervalsMs?: number[]
  skewMs?: number
  driftFraction?: number
  /** Progress lines (replica started, killed, restarted). */
  log?: (line: string) => void
}

interface ReplicaStats {
  holder: string
  fires: number
  won: number
  lost: number
  threw: number
  errors: number
}

export interface SoakResult {
  report: SoakReport
  jobs: JobSpec[]
  /** Counters printed by every replica that was stopped (not the killed one). */
  replicas: ReplicaStats[]
  kills: KillRecord[]
  /** Whether the kill landed inside a tick the killed replica had won. */
  killedMidTick: boolean
  /** Steady window length, ms. */
  windowMs: number
  /** Claim or tick errors other than the planned throws, with their messages. */
  errors: string[]
}

const REPLICA = fileURLToPath(new URL('./replica.ts', import.meta.url))
const SKEW_PRELOAD = new URL('../skew-clock.ts', import.meta.url).href
const ROOT = fileURLToPath(new URL('../../', import.meta.url))

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const elapsed = (since: number) => performance.now() - since

interface Replica {
  holder: string
  child: ChildProcess
  ready: Promise<void>
  stopped: Promise<ReplicaStats | null>
}

function startReplica(config: ReplicaConfig, skewMs: number, errors: string[]): Replica {
  const args = ['--import', 'tsx', ...(skewMs !== 0 ? ['--import', SKEW_PRELOAD] : []), REPLICA]
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, SOAK_CONFIG: JSON.stringify(config), SKEW_MS: String(skewMs) },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stats: ReplicaStats | null = null
  let markReady: () => void = () => {}
  let failReady: (e: Error) => void = () => {}
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve
    failReady = reject
  })
  ready.catch(() => {}) // awaited by the caller; a replica dying after that must not crash the soak
  let buffered = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk
    let nl = buffered.indexOf('\n')
    while (nl >= 0) {
      const line = buffered.slice(0, nl)
      buffered = buffered.slice(nl + 1)
      const message = JSON.parse(line) as { ready?: string; stopped?: ReplicaStats }
      if (message.ready) markReady()
      if (message.stopped) stats = message.stopped
      nl = buffered.indexOf('\n')
    }
  })
  let stderr = ''
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk
    for (const line of chunk.split('\n')) if (line.includes(`${config.holder} `)) errors.push(line)
  })
  const stopped = new Promise<ReplicaStats | null>((resolve) => {
    child.on('exit', (code, signal) => {
      failReady(new Error(`replica ${config.holder} exited (${code ?? signal}) before it was ready:\n${stderr}`))
      resolve(stats)
    })
  })
  return { holder: config.holder, child, ready, stopped }
}

async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Runs the soak and checks its history. Every process it starts is stopped, and its tables are
 * dropped, before it returns.
 *
 * @example
 * const { report } = await runSoak({ url: process.env.DATABASE_URL, seconds: 20, replicas: 4 })
 * console.log(formatReport(report))
 */
export async function runSoak(options: SoakOptions): Promise<SoakResult> {
  const { url, seconds, replicas: count, log = () => {} } = options
  if (!(count >= 3)) throw new Error(`the soak needs at least 3 replicas, got ${count}`)
  const intervals = options.intervalsMs ?? DEFAULT_INTERVALS_MS
  const skewMs = options.skewMs ?? DEFAULT_SKEW_MS
  const driftFraction = options.driftFraction ?? 0.2
  const maxInterval = Math.max(...intervals)
  const suffix = randomBytes(4).toString('hex')
  const jobs: JobSpec[] = intervals.map((intervalMs) => ({
    name: `soak-${intervalMs}ms`,
    intervalMs,
    leaseMs: leaseForInterval(intervalMs),
  }))
  const table = `soak_leases_${suffix}`
  const history = `soak_history_${suffix}`
  const plan = `soak_plan_${suffix}`
  const admin = new pg.Pool({ connectionString: options.adminUrl ?? url, max: 2 })
  // pool.end() resolves before its sockets close; a server stopping right after may still send
  // them a FATAL, which must not crash the process that has already finished its work.
  admin.on('error', () => {})
  const dbNow = async () =>
    Number((await admin.query(`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::text AS ms`)).rows[0].ms)

  const all: Replica[] = []
  const errors: string[] = []
  try {
    await admin.query(createTableSql(table))
    await admin.query(`CREATE TABLE "${history}" (
      id bigserial PRIMARY KEY, job text NOT NULL, holder text NOT NULL, claimed_at timestamptz NOT NULL,
      started_at timestamptz NOT NULL DEFAULT clock_timestamp(), outcome text, finished_at timestamptz)`)
    await admin.query(`CREATE TABLE "${plan}" (job text PRIMARY KEY, at timestamptz NOT NULL, taken_by text)`)

    const config = (holder: string): ReplicaConfig => ({
      url,
      table,
      history,
      plan,
      holder,
      jobs,
      driftFraction,
      workMs: Math.min(100, Math.min(...intervals) / 10),
    })
    // replica-0 runs hours off; replica-1 is the one killed and restarted.
    for (let i = 0; i < count; i++) all.push(startReplica(config(`replica-${i}#1`), i === 0 ? skewMs : 0, errors))
    await within(Promise.all(all.map((r) => r.ready)), 60_000, 'starting the replicas')
    const started = performance.now()
    const t0 = await dbNow()
    log(`${count} replicas up (replica-0 skewed by ${skewMs} ms)`)

    // The steady window: one long interval after everyone is up, to two before the stop, so the
    // gap after its last run still ends before the replicas stop.
    const window = { start: t0 + maxInterval, end: t0 + seconds * 1000 - 2 * maxInterval }
    if (window.end - window.start < 2 * maxInterval) {
      throw new Error(`--seconds ${seconds} is too short for a steady window with a ${maxInterval} ms interval`)
    }
    for (const job of jobs) {
      const latest = window.end - 2 * job.intervalMs
      const at = window.start + Math.random() * Math.max(0, latest - window.start)
      await admin.query(`INSERT INTO "${plan}" (job, at) VALUES ($1, to_timestamp($2::float8 / 1000))`, [job.name, at])
    }

    // Kill replica-1 in the first half of the steady window, preferably while it is inside a tick
    // it won (its history row has no outcome yet): then the occurrence it held is lost, and no
    // other replica may run it before the lease ends. Restart it a few seconds later, as a new
    // process with a new pool.
    const kills: KillRecord[] = []
    const span = window.end - window.start
    await sleep(window.start - t0 + 0.1 * span - elapsed(started))
    const victim = all[1]!
    const giveUp = performance.now() + 0.4 * span
    let midTick = false
    while (!midTick && performance.now() < giveUp) {
      const { rowCount } = await admin.query(`SELECT 1 FROM "${history}" WHERE holder = $1 AND outcome IS NULL`, [
        victim.holder,
      ])
      midTick = rowCount !== null && rowCount > 0
      if (!midTick) await sleep(5)
    }
    victim.child.kill('SIGKILL')
    kills.push({ holder: victim.holder, at: await dbNow() })
    await victim.stopped
    // The tick seen running may have ended between that look and the signal: what the history
    // holds once the replica is dead says whether it died inside one.
    const { rowCount: left } = await admin.query(`SELECT 1 FROM "${history}" WHERE holder = $1 AND outcome IS NULL`, [
      victim.holder,
    ])
    midTick = left !== null && left > 0
    log(`${victim.holder} killed ${midTick ? 'inside a tick it had won' : 'between ticks'}`)
    await sleep(1000 + Math.random() * 2000)
    const reborn = startReplica(config('replica-1#2'), 0, errors)
    all.push(reborn)
    await within(reborn.ready, 60_000, 'restarting the killed replica')
    log(`${reborn.holder} started`)

    await sleep(seconds * 1000 - elapsed(started))
    const live = all.filter((r) => r !== victim)
    for (const r of live) r.child.kill('SIGTERM')
    const stats = await within(Promise.all(live.map((r) => r.stopped)), 30_000, 'stopping the replicas')
    live.forEach((r, i) => {
      if (stats[i] === null) errors.push(`${r.holder} exited before it was asked to stop`)
    })

    const { rows } = await admin.query(
      `SELECT job, holder, (extract(epoch FROM claimed_at) * 1000)::text AS claimed_ms, outcome FROM "${history}"`,
    )
    const runs: RunRecord[] = rows.map((r) => ({
      job: r.job,
      holder: r.holder,
      claimedAt: Number(r.claimed_ms),
      outcome: r.outcome,
    }))
    const report = checkHistory({ jobs, runs, kills, window })
    return {
      report,
      jobs,
      replicas: stats.filter((s): s is ReplicaStats => s !== null),
      kills,
      killedMidTick: midTick,
      windowMs: span,
      errors,
    }
  } finally {
    for (const r of all) if (r.child.exitCode === null && r.child.signalCode === null) r.child.kill('SIGKILL')
    await Promise.all(all.map((r) => r.stopped))
    await admin.query(`DROP TABLE IF EXISTS "${table}", "${history}", "${plan}"`).catch(() => {})
    await admin.end()
  }
}
