/**
 * `npm run demo`: the problem and the fix in about a minute. Starts a throwaway Postgres, spawns
 * replica processes that all schedule the same every-second job with node-cron (each fire late
 * by a random drift), and runs it three ways: unguarded, with the advisory-lock pattern, and with
 * pg-cron-lease. Prints a timeline of who ran each occurrence and a summary per mode.
 *
 *   npm run demo -- [--mode none|advisory|lease[,…]] [--seconds 10] [--replicas 4] [--drift 150]
 *                   [--pg 18|14] [--database-url URL] [--dashboard [--dashboard-port 8080]]
 *
 * `--dashboard` keeps the database and the replicas once the modes have run: they go on running
 * two jobs claimed by occurrence, `demo:lease` (healthy) and `demo:incidents` (a miss, an error,
 * and a run whose replica is killed mid-tick), and the dashboard is served on that table (on
 * 127.0.0.1, read-only) until Ctrl-C.
 *
 * `--database-url` runs against an existing server instead (a uniquely named table is created and
 * dropped). Everything started is stopped, and the temporary data removed, on completion and on
 * Ctrl-C.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { EventEmitter } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import pg from 'pg'
import {
  MODE_TEXT,
  type Mode,
  type Occurrence,
  paint,
  type Summary,
  summarise,
  summaryTable,
  timelineHeader,
  timelineRow,
} from '../dev/demo-view.ts'
import { Cleanups, parseMajor, startServer } from '../dev/lifecycle.ts'
import { createDashboard } from '../src/dashboard/index.ts'
import { createTableSql, quoteTable } from '../src/index.ts'
import type { FromReplica, Plan, Scene, ToReplica } from './demo-replica.ts'

const MODES: Mode[] = ['none', 'advisory', 'lease']
const TICK_MS = 50
/** The jobs the replicas run while the dashboard is served: a healthy one, and one with incidents. */
const SCENE_JOBS = ['demo:lease', 'demo:incidents'] as const

const { values } = parseArgs({
  options: {
    mode: { type: 'string' },
    seconds: { type: 'string', default: '10' },
    replicas: { type: 'string', default: '4' },
    drift: { type: 'string', default: '150' },
    pg: { type: 'string' },
    'database-url': { type: 'string' },
    dashboard: { type: 'boolean' },
    'dashboard-port': { type: 'string', default: '8080' },
  },
})
const modes = values.mode === undefined ? MODES : (values.mode.split(',') as Mode[])
const seconds = whole('--seconds', values.seconds, 1, 600)
const replicas = whole('--replicas', values.replicas, 2, 32)
const driftMs = whole('--drift', values.drift, 0, 700)
const dashboardPort = whole('--dashboard-port', values['dashboard-port'], 0, 65535)
if (!modes.every((m) => MODES.includes(m)))
  usage(`--mode must be one of ${MODES.join(', ')} (or several, comma-separated), got ${values.mode}`)
const major = parseMajor(values.pg)

const out = process.stdout
const p = paint(out)
const say = (line = '') => out.write(`${line}\n`)
const cleanups = new Cleanups()
cleanups.install()

say(p.bold('pg-cron-lease demo'))
say(
  `${replicas} replicas schedule the same job every second with node-cron; each fire waits a random ` +
    `0–${driftMs} ms (drift) and the tick takes ${TICK_MS} ms.`,
)
const server = await startServer(values['database-url'], major, cleanups)
say(
  p.dim(
    values['database-url']
      ? `Postgres at ${redact(server.url)}`
      : `Postgres ${server.major} (embedded) on 127.0.0.1:${server.port}, data in ${server.dataDir}`,
  ),
)

const admin = new pg.Client({ connectionString: server.url })
// On Ctrl-C the server may shut down before this connection is closed; that is expected.
admin.on('error', () => {})
await admin.connect()
cleanups.add(() => admin.end())
// On an existing server, a table of its own that is dropped again; on the throwaway one, the default.
const table = values['database-url'] ? `demo_leases_${randomBytes(4).toString('hex')}` : 'cron_leases'
await admin.query(createTableSql(table))
if (values['database-url']) cleanups.add(() => admin.query(`DROP TABLE IF EXISTS ${quoteTable(table)}`).then(() => {}))

// The replicas by number (replica n is children[n - 1]); one the demo kills is replaced by a new
// process under the same number, as an orchestrator would restart it.
const REPLICA_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'demo-replica.ts')
const children: ChildProcess[] = []
const fromReplicas = new EventEmitter()
// Replicas the demo killed on purpose, whose exit is no error; and whether everything is stopping.
const killed = new WeakSet<ChildProcess>()
let stopping = false
await spawnReplicas()
// The plan of the mode that ran last, for the dashboard's scene to go on from.
let lastPlan: Plan | undefined
const summaries: Summary[] = []
for (const mode of modes) summaries.push(await runMode(mode))

say()
say(p.bold(`Summary: ${replicas} replicas, ${seconds} occurrences per mode, drift 0–${driftMs} ms`))
say(summaryTable(summaries, p))
say(p.dim('  duplicates = runs beyond the first of an occurrence; misses = occurrences no replica ran'))
if (values.dashboard) await serveDashboard()
await cleanups.run()

/**
 * Serves the dashboard on the demo's table until Ctrl-C, which runs the clean-ups as usual. The
 * replicas go on running the scene's jobs meanwhile, so what the page shows stays current.
 */
async function serveDashboard(): Promise<never> {
  await stageScene()
  const pool = new pg.Pool({ connectionString: server.url, max: 4 })
  pool.on('error', () => {})
  const web = http.createServer(createDashboard({ db: pool, table }))
  await new Promise<void>((resolve) => web.listen(dashboardPort, '127.0.0.1', resolve))
  cleanups.add(async () => {
    web.closeAllConnections()
    web.close()
    await pool.end()
  })
  say()
  say(p.bold(`Dashboard of the demo's table: http://127.0.0.1:${(web.address() as AddressInfo).port}/`))
  say(p.dim(`  the replicas keep running ${SCENE_JOBS.join(' and ')}; Ctrl-C stops them and the database`))
  return new Promise<never>(() => {})
}

/**
 * What the dashboard is there to show, made the way it happens: every replica runs `demo:lease`
 * and `demo:incidents` each second, each occurrence claimed by its scheduled time, and three of
 * `demo:incidents`'s occurrences go wrong. One no replica fires (a miss, counted by the claim
 * after it), one whose tick throws (an error, with its message), and one whose replica the demo
 * kills with SIGKILL in the middle of the tick (a run that died: it never records an outcome). A
 * new process then takes the killed replica's place, as an orchestrator would start one. Returns
 * once two more occurrences have run, so the dead run is in the history, and the healthy
 * `demo:lease` is neither late nor failing.
 */
async function stageScene(): Promise<void> {
  // Straight on from the lease mode when it ran last and its next occurrence is still ahead, so
  // demo:lease misses nothing in between; else two seconds out, as a mode starts.
  const next = lastPlan?.mode === 'lease' ? lastPlan.last + 1 : undefined
  const first = next !== undefined && next * 1000 - Date.now() > 300 ? next : Math.floor(Date.now() / 1000) + 2
  const missed = first + 3
  const failing = first + 5
  const dying = first + 7
  const scene: Scene = {
    first,
    table,
    driftMs,
    tickMs: TICK_MS,
    jobs: [
      { jobName: SCENE_JOBS[0], missed: [], failing: [], dying: [] },
      { jobName: SCENE_JOBS[1], missed: [missed], failing: [failing], dying: [dying] },
    ],
  }
  const time = (slot: number) => new Date(slot * 1000).toISOString().slice(11, 19)
  say()
  say(
    `${p.bold('Dashboard data:')} ${p.dim(`every replica runs ${SCENE_JOBS.join(' and ')} each second, claimed by occurrence; ${SCENE_JOBS[1]} meets three incidents`)}`,
  )
  let saidMissed = false
  let done!: () => void
  const settled = new Promise<void>((resolve) => {
    done = resolve
  })
  const onMessage = (m: FromReplica) => {
    if (m.type !== 'scene' || m.jobName !== SCENE_JOBS[1]) return
    if (m.state === 'ran' && m.slot > missed && !saidMissed) {
      saidMissed = true
      say(`  ${time(missed)}  ${SCENE_JOBS[1]}  ${p.yellow('missed')}: no replica fired for it`)
    }
    if (m.state === 'error')
      say(`  ${time(m.slot)}  ${SCENE_JOBS[1]}  ${p.red('error')} on replica-${m.replica}: ${m.error}`)
    if (m.state === 'running' && m.slot === dying) {
      const child = children[m.replica - 1]!
      killed.add(child)
      child.kill('SIGKILL')
      say(
        `  ${time(m.slot)}  ${SCENE_JOBS[1]}  ${p.red('died')}: replica-${m.replica} (pid ${child.pid}) killed (SIGKILL) during its run; a new replica-${m.replica} starts`,
      )
      void startReplica(m.replica).then(
        (fresh) => fresh.send({ type: 'scene', scene } satisfies ToReplica),
        (error: Error) => process.stderr.write(`${error.message}\n`),
      )
    }
    // The run after the death records it in the history; one more, and the page has settled.
    if (m.state === 'ran' && m.slot >= dying + 2) done()
  }
  fromReplicas.on('message', onMessage)
  for (const child of children) if (child.connected) child.send({ type: 'scene', scene } satisfies ToReplica)
  // If no report comes (a machine far too busy), the dashboard is served all the same.
  const deadline = setTimeout(done, (dying + 6) * 1000 - Date.now())
  await settled
  clearTimeout(deadline)
  fromReplicas.off('message', onMessage)
}

/**
 * Starts replica `n` (from 1) in `children[n - 1]`; resolves once it is connected to the database.
 * Its messages are passed on to {@link fromReplicas}.
 */
function startReplica(n: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', REPLICA_SCRIPT], {
    env: { ...process.env, DATABASE_URL: server.url, DEMO_REPLICA: String(n) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  })
  children[n - 1] = child
  let stderr = ''
  child.stderr?.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4000)
  })
  child.on('exit', (code, signal) => {
    if (code !== 0 && !cleanups.interrupted && !stopping && !killed.has(child)) {
      process.stderr.write(`replica ${n} exited (${signal ?? code}):\n${stderr}\n`)
    }
  })
  child.on('message', (m: FromReplica) => fromReplicas.emit('message', m))
  return new Promise<ChildProcess>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`replica ${n} did not start within 60 s`)), 60_000)
    child.once('exit', () => reject(new Error(`replica ${n} exited during start-up`)))
    child.on('message', (m: FromReplica) => {
      if (m.type === 'ready') {
        clearTimeout(timer)
        resolve(child)
      }
    })
  })
}

async function spawnReplicas(): Promise<void> {
  cleanups.add(async () => {
    stopping = true
    await Promise.all(children.map((child) => stopChild(child)))
  })
  await Promise.all(Array.from({ length: replicas }, (_, i) => startReplica(i + 1))).catch(async (error) => {
    process.stderr.write(`${(error as Error).message}\n`)
    await cleanups.run()
    process.exit(1)
  })
  await cleanups.checkpoint()
}

/** Asks a replica to stop, then insists: SIGKILL if it has not exited within 3 s. */
function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
    child.once('exit', () => {
      clearTimeout(timer)
      resolve()
    })
    if (child.connected) child.send({ type: 'stop' } satisfies ToReplica)
    else child.kill('SIGTERM')
  })
}

/** Runs one mode over `seconds` whole-second occurrences, printing each row once it is complete. */
async function runMode(mode: Mode): Promise<Summary> {
  say()
  say(`${p.bold(`mode: ${mode}`)} ${p.dim(`(${MODE_TEXT[mode]})`)}`)
  say(timelineHeader(replicas, p))
  // Start two seconds out, so every replica has the plan before the first occurrence fires.
  const first = Math.floor(Date.now() / 1000) + 2
  const plan: Plan = {
    mode,
    first,
    last: first + seconds - 1,
    jobName: `demo:${mode}`,
    table,
    driftMs,
    tickMs: TICK_MS,
  }
  lastPlan = plan
  const rows: Occurrence[] = Array.from({ length: seconds }, (_, i) => ({
    slot: first + i,
    marks: Array.from({ length: replicas }, () => undefined),
  }))
  const reported = rows.map(() => 0)
  let printed = 0
  let done!: () => void
  const finished = new Promise<void>((resolve) => {
    done = resolve
  })
  const flush = (force: boolean) => {
    while (printed < rows.length && (reported[printed] === replicas || (force && deadline(printed) <= Date.now()))) {
      say(timelineRow(rows[printed]!, p))
      printed++
    }
    if (printed === rows.length) done()
  }
  // A replica that never reports (it crashed, or its timer fired far too late) must not stall the
  // timeline: its cell is shown as '?' once the occurrence is well over.
  const deadline = (i: number) => (first + i + 1) * 1000 + driftMs + TICK_MS + 2000
  const onMessage = (m: FromReplica) => {
    if (m.type !== 'tick') return
    const i = m.slot - first
    const row = rows[i]
    if (!row || row.marks[m.replica - 1] !== undefined) return
    row.marks[m.replica - 1] = m.error ? 'error' : m.ran ? 'ran' : 'skipped'
    reported[i]!++
    flush(false)
  }
  fromReplicas.on('message', onMessage)
  for (const child of children) if (child.connected) child.send({ type: 'plan', plan } satisfies ToReplica)
  const timer = setInterval(() => flush(true), 250)
  await finished
  clearInterval(timer)
  fromReplicas.off('message', onMessage)
  const summary = summarise(mode, rows)
  say(
    p.dim(
      `  ${summary.occurrences} occurrences, ${summary.runs} runs, ${summary.duplicates} duplicates, ${summary.misses} misses`,
    ),
  )
  return summary
}

function whole(flag: string, value: string | undefined, min: number, max: number): number {
  const n = Number(value)
  if (!Number.isInteger(n) || n < min || n > max)
    usage(`${flag} must be a whole number from ${min} to ${max}, got ${value}`)
  return n
}

function usage(message: string): never {
  process.stderr.write(
    `${message}\nusage: npm run demo -- [--mode none|advisory|lease[,...]] [--seconds N] [--replicas N] [--drift MS] [--pg 18|14] [--database-url URL] [--dashboard [--dashboard-port N]]\n`,
  )
  process.exit(2)
}

function redact(url: string): string {
  const u = new URL(url)
  if (u.password) u.password = '***'
  return u.toString()
}
