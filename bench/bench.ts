/**
 * `npm run bench`: the claim measured against the floor (`SELECT 1`) and against the usual ways of
 * doing the same thing, in one process and one run, side by side.
 *
 *   npm run bench -- [--quick] [--pg 18|14] [--json PATH] [--svg PATH]
 *                    [--fleet-jobs N] [--fleet-order lockstep|staggered]
 *
 * An embedded Postgres 18 by default (`--pg 14` for 14); `DATABASE_URL` targets another server
 * (tables with unique names are created and dropped). Writes a table to the terminal, the numbers
 * to bench/results/latest.json and a bar chart of the ratios to docs/bench.svg (with `--quick`:
 * bench/results/quick.json and bench/results/quick.svg, so a quick run never replaces the chart).
 */
import { randomBytes } from 'node:crypto'
import { mkdirSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { Cleanups, parseMajor, startServer } from '../scripts/lifecycle.ts'
import { createTableSql, quoteTable, withCronLease } from '../src/index.ts'
import { claimSql, renewSql } from '../src/sql.ts'
import { renderChart } from './chart.ts'
import { clockMs, mark, Series, type Series as SeriesType, type Stats, serverCpu, spent } from './measure.ts'
import { advisoryTick, plainUpsertSql, shedLockClaim } from './peers.ts'

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    pg: { type: 'string' },
    json: { type: 'string' },
    svg: { type: 'string' },
    'fleet-jobs': { type: 'string' },
    'fleet-order': { type: 'string', default: 'lockstep' },
  },
})
const quick = values.quick
const profile = quick
  ? {
      rounds: 2,
      blockMs: 60,
      warmupOps: 40,
      raceMs: 300,
      raceJobs: 1_000,
      fleetJobs: 200,
      fleetReplicas: 20,
      fleetRounds: 1,
    }
  : {
      rounds: 6,
      blockMs: 500,
      warmupOps: 300,
      raceMs: 3000,
      raceJobs: 20_000,
      fleetJobs: 10_000,
      fleetReplicas: 20,
      fleetRounds: 1,
    }
if (values['fleet-jobs'] !== undefined) {
  const jobs = Number(values['fleet-jobs'])
  if (!Number.isInteger(jobs) || jobs < 1)
    throw new Error(`--fleet-jobs must be a positive whole number, got ${values['fleet-jobs']}`)
  profile.fleetJobs = jobs
}
// lockstep: every replica claims the jobs in the same order from the same moment, as replicas whose
// schedulers fire the same list at the same second do; staggered: each starts at its own offset.
const fleetOrder = values['fleet-order']
if (fleetOrder !== 'lockstep' && fleetOrder !== 'staggered') {
  throw new Error(`--fleet-order must be lockstep or staggered, got ${fleetOrder}`)
}
const jsonPath = values.json ?? (quick ? 'bench/results/quick.json' : 'bench/results/latest.json')
const svgPath = values.svg ?? (quick ? 'bench/results/quick.svg' : 'docs/bench.svg')
const HOUR = 3_600_000

const cleanups = new Cleanups()
cleanups.install()
const server = await startServer(process.env.DATABASE_URL, parseMajor(values.pg), cleanups)

const clients: pg.Client[] = []
async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: server.url })
  c.on('error', () => {})
  await c.connect()
  clients.push(c)
  return c
}
cleanups.add(() => Promise.all(clients.map((c) => c.end().catch(() => {}))).then(() => {}))

const observer = await client()
const db = await client()
const pool = new pg.Pool({ connectionString: server.url, max: 4 })
pool.on('error', () => {})
cleanups.add(() => pool.end())

// Server CPU is read from /proc for the embedded server only; another server reports none.
const cpu = serverCpu(server.dataDir)
const { rows: versionRows } = await observer.query('SHOW server_version')
const serverVersion = String(versionRows[0].server_version)
const suffix = randomBytes(3).toString('hex')
// A table per role, so that the rows one case rewrites never share a page with the row another
// case only reads (reading a page full of dead row versions can prune it, which writes WAL).
const tables = {
  win: `bench_win_${suffix}`,
  winPrepared: `bench_win_prepared_${suffix}`,
  lose: `bench_lose_${suffix}`,
  renew: `bench_renew_${suffix}`,
  plainWin: `bench_plain_win_${suffix}`,
  plainWinPrepared: `bench_plain_win_prepared_${suffix}`,
  plainLose: `bench_plain_lose_${suffix}`,
  shed: `bench_shed_${suffix}`,
  raceLease: `bench_race_lease_${suffix}`,
  racePlain: `bench_race_plain_${suffix}`,
}
const fleetTables = { lease: `bench_fleet_lease_${suffix}`, plain: `bench_fleet_plain_${suffix}` }
for (const table of [...Object.values(tables), ...Object.values(fleetTables)]) {
  await observer.query(createTableSql(table))
  cleanups.add(() => observer.query(`DROP TABLE IF EXISTS ${quoteTable(table)}`).then(() => {}))
}

// Winning claims cycle through many jobs with a short lease, so each finds its own previous lease
// expired without an extra statement to expire it (which would add its own xid and WAL).
const WIN_JOBS = 500
const WIN_LEASE_MS = 20
// Rows that exist, with an expired lease: the steady state of a job that has run before.
for (const table of [tables.win, tables.winPrepared, tables.plainWin, tables.plainWinPrepared]) {
  await observer.query(
    `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder)
     SELECT 'win-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, ${WIN_JOBS - 1}) AS i`,
  )
}
// The job every losing claimant finds held by another replica.
for (const table of [tables.lose, tables.plainLose, tables.shed]) {
  await observer.query(
    `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder) VALUES ('held', clock_timestamp() + interval '1 day', 'other')`,
  )
}
const renewing = await withCronLease(db, 'renewing', HOUR, (ctx) => ctx.claimToken, { table: tables.renew })
const renewToken = renewing.result!

let unexpected = 0
const expect = (ok: boolean) => {
  if (!ok) unexpected++
}
const noop = () => undefined
const holder = 'bench'

interface Case {
  id: string
  label: string
  group: 'floor' | 'library' | 'peer' | 'diagnostic'
  unit: string
  op: (i: number) => Promise<void>
}

const knownRows = new Set<string>(['held'])
const single: Case[] = [
  {
    id: 'select1',
    label: 'SELECT 1',
    group: 'floor',
    unit: 'query',
    op: async () => void (await db.query('SELECT 1')),
  },
  {
    id: 'claim_win',
    label: 'claim, winning',
    group: 'library',
    unit: 'claim',
    op: async (i) =>
      expect((await withCronLease(db, `win-${i % WIN_JOBS}`, WIN_LEASE_MS, noop, { table: tables.win, holder })).ran),
  },
  {
    id: 'claim_lose',
    label: 'claim, losing',
    group: 'library',
    unit: 'claim',
    op: async () => expect(!(await withCronLease(db, 'held', HOUR, noop, { table: tables.lose, holder })).ran),
  },
  {
    // The least any claim has to do: read the job's row with a parameterised statement.
    id: 'select_held',
    label: 'SELECT the held row (parameterised)',
    group: 'diagnostic',
    unit: 'query',
    op: async () =>
      expect(
        (
          await db.query(
            `SELECT 1 FROM ${quoteTable(tables.lose)} WHERE job_name = $1::text AND lease_until > clock_timestamp()`,
            ['held'],
          )
        ).rowCount === 1,
      ),
  },
  {
    // Not something the library does (named statements break under PgBouncer's transaction
    // pooling): it shows how much of a claim is the server parsing, analysing and planning the
    // text on every call.
    id: 'claim_win_prepared',
    label: 'claim, winning, as a named prepared statement',
    group: 'diagnostic',
    unit: 'claim',
    op: async (i) =>
      expect(
        (
          await db.query({
            name: 'bench-claim-win',
            text: claimSql(tables.winPrepared),
            values: [`win-${i % WIN_JOBS}`, WIN_LEASE_MS, holder],
          })
        ).rowCount === 1,
      ),
  },
  {
    id: 'claim_lose_prepared',
    label: 'claim, losing, as a named prepared statement',
    group: 'diagnostic',
    unit: 'claim',
    op: async () =>
      expect(
        (await db.query({ name: 'bench-claim-lose', text: claimSql(tables.lose), values: ['held', HOUR, holder] }))
          .rowCount === 0,
      ),
  },
  {
    id: 'renew',
    label: 'renew (fenced)',
    group: 'library',
    unit: 'renew',
    op: async () => expect((await db.query(renewSql(tables.renew), ['renewing', HOUR, renewToken])).rowCount === 1),
  },
  {
    id: 'plain_win',
    label: 'plain upsert, winning',
    group: 'peer',
    unit: 'claim',
    op: async (i) =>
      expect(
        (await db.query(plainUpsertSql(tables.plainWin), [`win-${i % WIN_JOBS}`, WIN_LEASE_MS, holder])).rowCount === 1,
      ),
  },
  {
    id: 'plain_win_prepared',
    label: 'plain upsert, winning, as a named prepared statement',
    group: 'diagnostic',
    unit: 'claim',
    op: async (i) =>
      expect(
        (
          await db.query({
            name: 'bench-plain-win',
            text: plainUpsertSql(tables.plainWinPrepared),
            values: [`win-${i % WIN_JOBS}`, WIN_LEASE_MS, holder],
          })
        ).rowCount === 1,
      ),
  },
  {
    id: 'plain_lose',
    label: 'plain upsert, losing',
    group: 'peer',
    unit: 'claim',
    op: async () => expect((await db.query(plainUpsertSql(tables.plainLose), ['held', HOUR, holder])).rowCount === 0),
  },
  {
    id: 'advisory',
    label: 'advisory lock (connect, try, unlock, release)',
    group: 'peer',
    unit: 'tick',
    op: async () => expect((await advisoryTick(pool, 'advisory', noop)).ran),
  },
  {
    id: 'shedlock_lose_first',
    label: 'ShedLock-style, losing: insert, then update',
    group: 'peer',
    unit: 'claim',
    op: async () => expect(!(await shedLockClaim(db, tables.shed, 'held', HOUR, holder, new Set()))),
  },
  {
    id: 'shedlock_lose',
    label: 'ShedLock-style, losing: update (row known)',
    group: 'peer',
    unit: 'claim',
    op: async () => expect(!(await shedLockClaim(db, tables.shed, 'held', HOUR, holder, knownRows))),
  },
]
// Shown in this order: the floor, the library, the other patterns, then the diagnostics.
const GROUPS = ['floor', 'library', 'peer', 'diagnostic']
single.sort((a, b) => GROUPS.indexOf(a.group) - GROUPS.indexOf(b.group))

log(
  `pg-cron-lease bench${quick ? ' (--quick)' : ''}: Postgres ${serverVersion}, Node ${process.versions.node}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'})`,
)
if (server.dataDir) log(`embedded Postgres ${server.major} on 127.0.0.1:${server.port}, data in ${server.dataDir}`)
log('warming up…')
for (const c of single) for (let i = 0; i < profile.warmupOps; i++) await c.op(i)
await observer.query('CHECKPOINT')

// Interleaved blocks: every case sees the same moments of a noisy machine.
const series = new Map<string, SeriesType>(single.map((c) => [c.id, new Series()]))
for (let round = 0; round < profile.rounds; round++) {
  log(`single operations: round ${round + 1} of ${profile.rounds}`)
  for (const c of single) await series.get(c.id)!.block(observer, c.op, profile.blockMs, 20, cpu)
}

// Races: every claimant on its own connection fires at once; one round is timed until all answered.
interface RaceResult extends Stats {
  claimants: number
  rounds: number
  violations: number
  empty: number
}
// Each round races for a job of its own whose row exists with an expired lease, so every round
// has exactly one lease to win and no statement is needed between rounds to expire the last one.
const RACE_JOBS = profile.raceJobs
async function raceCase(claimants: number, table: string, kind: 'lease' | 'plain'): Promise<RaceResult> {
  const conns = await Promise.all(Array.from({ length: claimants }, () => client()))
  await observer.query(
    `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder)
     SELECT 'race${claimants}-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, ${RACE_JOBS - 1}) AS i
     ON CONFLICT (job_name) DO NOTHING`,
  )
  await observer.query(`VACUUM ANALYZE ${quoteTable(table)}`)
  let violations = 0
  let empty = 0
  let next = 0
  const claim = async (c: pg.Client, job: string, i: number): Promise<boolean> =>
    kind === 'lease'
      ? (await withCronLease(c, job, HOUR, noop, { table, holder: `c${i}` })).ran
      : (await c.query(plainUpsertSql(table), [job, HOUR, `c${i}`])).rowCount === 1
  const round = async () => {
    if (next >= RACE_JOBS) throw new Error(`a race ran out of its ${RACE_JOBS} prepared jobs`)
    const job = `race${claimants}-${next++}`
    const winners = (await Promise.all(conns.map((c, i) => claim(c, job, i)))).filter(Boolean).length
    if (winners > 1) violations++
    if (winners === 0) empty++
  }
  for (let r = 0; r < 20; r++) await round()
  const s = new Series()
  for (let b = 0; b < profile.rounds; b++) await s.block(observer, round, profile.raceMs / profile.rounds, 5, cpu)
  for (const c of conns) {
    clients.splice(clients.indexOf(c), 1)
    await c.end()
  }
  return { ...s.stats(), claimants, rounds: s.samples.length, violations, empty }
}
const races: Array<{ id: string; label: string; group: 'library' | 'peer'; result: RaceResult }> = []
for (const [n, kind] of [
  [10, 'lease'],
  [10, 'plain'],
  [50, 'lease'],
  [50, 'plain'],
] as const) {
  log(`race: ${n} claimants, ${kind === 'lease' ? 'the library' : 'plain upsert'}`)
  const table = kind === 'lease' ? tables.raceLease : tables.racePlain
  races.push({
    id: `race${n}_${kind}`,
    label: `${n} claimants racing one job${kind === 'plain' ? ', plain upsert' : ''}`,
    group: kind === 'lease' ? 'library' : 'peer',
    result: await raceCase(n, table, kind),
  })
}

// Connections held while the tick runs, read from the pool inside the tick itself.
const held = async (run: (tick: () => number) => Promise<unknown>) => {
  let inTick = -1
  await run(() => {
    inTick = pool.totalCount - pool.idleCount
    return inTick
  })
  return inTick
}
const connectionsHeld: Record<string, number> = {
  claim_win: await held((tick) => withCronLease(pool, `held-${suffix}`, HOUR, tick, { table: tables.win })),
  plain_win: await held(async (tick) => {
    if ((await pool.query(plainUpsertSql(tables.plainWin), [`held-${suffix}`, HOUR, holder])).rowCount === 1) tick()
  }),
  advisory: await held((tick) => advisoryTick(pool, 'advisory', tick)),
  shedlock_lose_first: await held(async (tick) => {
    if (await shedLockClaim(pool, tables.shed, `held-${suffix}`, HOUR, holder, new Set())) tick()
  }),
}

// The fleet: every replica claims every job once, all at the same time, each on its own
// connection; the round is timed until the last claim has answered.
interface FleetResult {
  order: string
  jobs: number
  replicas: number
  claims: number
  winners: number
  ms: number
  claimsPerSec: number
  xidsPerClaim: number
  walPerClaim: number
  /** CPU per claim, in µs: every server process (null when not local), and this client process. */
  serverCpuUsPerClaim: number | null
  clientCpuUsPerClaim: number
}
async function fleetRound(kind: 'lease' | 'plain'): Promise<FleetResult> {
  const table = fleetTables[kind]
  const { fleetJobs: jobs, fleetReplicas: replicas } = profile
  await observer.query(`TRUNCATE ${quoteTable(table)}`)
  await observer.query(
    `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder)
     SELECT 'job-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, ${jobs - 1}) AS i`,
  )
  await observer.query(`VACUUM ANALYZE ${quoteTable(table)}`)
  const conns = await Promise.all(Array.from({ length: replicas }, () => client()))
  let winners = 0
  const cpuBefore = cpu?.()
  const clientBefore = process.cpuUsage()
  const before = await mark(observer)
  const start = clockMs()
  await Promise.all(
    conns.map(async (c, r) => {
      for (let j = 0; j < jobs; j++) {
        const job = `job-${fleetOrder === 'staggered' ? (j + Math.floor((r * jobs) / replicas)) % jobs : j}`
        const won =
          kind === 'lease'
            ? (await withCronLease(c, job, HOUR, noop, { table, holder: `replica-${r}` })).ran
            : (await c.query(plainUpsertSql(table), [job, HOUR, `replica-${r}`])).rowCount === 1
        if (won) winners++
      }
    }),
  )
  const ms = clockMs() - start
  const { xids, wal } = await spent(observer, before)
  const clientCpu = process.cpuUsage(clientBefore)
  const serverMs = cpu && cpuBefore !== undefined ? cpu() - cpuBefore : null
  for (const c of conns) {
    clients.splice(clients.indexOf(c), 1)
    await c.end()
  }
  const claims = jobs * replicas
  return {
    order: fleetOrder,
    jobs,
    replicas,
    claims,
    winners,
    ms,
    claimsPerSec: (claims / ms) * 1000,
    xidsPerClaim: xids / claims,
    walPerClaim: wal / claims,
    serverCpuUsPerClaim: serverMs === null ? null : (serverMs / claims) * 1000,
    clientCpuUsPerClaim: (clientCpu.user + clientCpu.system) / claims,
  }
}
const fleet: { lease: FleetResult[]; plain: FleetResult[] } = { lease: [], plain: [] }
for (let r = 0; r < profile.fleetRounds; r++) {
  for (const kind of ['plain', 'lease'] as const) {
    log(
      `fleet: ${profile.fleetJobs} jobs × ${profile.fleetReplicas} replicas, ${kind === 'lease' ? 'the library' : 'plain upsert'}`,
    )
    fleet[kind].push(await fleetRound(kind))
  }
}
const best = (rounds: FleetResult[]) => rounds.reduce((a, b) => (b.claimsPerSec > a.claimsPerSec ? b : a))
const fleetLease = best(fleet.lease)
const fleetPlain = best(fleet.plain)

// Results, each as a ratio to the floor measured in the same run.
const floor = series.get('select1')!.stats()
interface Row {
  id: string
  label: string
  group: string
  unit: string
  p50: number
  p90: number
  p99: number
  opsPerSec: number
  ratio: { p50: number; p90: number; p99: number; opsPerSec: number }
  xidsPerOp: number
  walBytesPerOp: number
  serverCpuUsPerOp: number | null
  connectionsHeldDuringTick: number | null
  ops: number
  extra?: Record<string, number>
}
const toRow = (
  c: { id: string; label: string; group: string; unit: string },
  s: Stats,
  extra?: Record<string, number>,
): Row => ({
  id: c.id,
  label: c.label,
  group: c.group,
  unit: c.unit,
  p50: s.p50,
  p90: s.p90,
  p99: s.p99,
  opsPerSec: s.opsPerSec,
  ratio: {
    p50: s.p50 / floor.p50,
    p90: s.p90 / floor.p90,
    p99: s.p99 / floor.p99,
    opsPerSec: s.opsPerSec / floor.opsPerSec,
  },
  xidsPerOp: s.xidsPerOp,
  walBytesPerOp: s.walPerOp,
  serverCpuUsPerOp: s.serverCpuUsPerOp,
  connectionsHeldDuringTick: connectionsHeld[c.id] ?? null,
  ops: s.ops,
  ...(extra ? { extra } : {}),
})
const rows: Row[] = [
  ...single.map((c) => toRow(c, series.get(c.id)!.stats())),
  ...races.map((r) =>
    toRow({ ...r, unit: 'round' }, r.result, {
      claimants: r.result.claimants,
      violations: r.result.violations,
      emptyRounds: r.result.empty,
    }),
  ),
]
const row = (id: string) => rows.find((r) => r.id === id)!

const lose = row('claim_lose')
const targets = [
  {
    name: 'losing claim p50 ≤ 2× SELECT 1, with 0 transaction IDs and 0 WAL bytes',
    value: `${fmt(lose.ratio.p50)}×, ${fmt(lose.xidsPerOp)} xids, ${fmt(lose.walBytesPerOp)} B WAL`,
    pass: lose.ratio.p50 <= 2 && lose.xidsPerOp === 0 && lose.walBytesPerOp === 0,
  },
  {
    name: "winning claim p50 ≤ 1.15× the plain upsert's win",
    value: `${fmt(row('claim_win').p50 / row('plain_win').p50)}×`,
    pass: row('claim_win').p50 / row('plain_win').p50 <= 1.15,
  },
  {
    name: "fleet claims/s ≥ 2.5× the plain upsert's",
    value: `${fmt(fleetLease.claimsPerSec / fleetPlain.claimsPerSec)}×`,
    pass: fleetLease.claimsPerSec / fleetPlain.claimsPerSec >= 2.5,
  },
]

const meta = {
  date: new Date().toISOString(),
  profile: quick ? 'quick' : 'full',
  postgres: serverVersion,
  server: process.env.DATABASE_URL ? 'DATABASE_URL' : `embedded ${server.major}`,
  node: process.versions.node,
  cpus: os.cpus().length,
  cpuModel: os.cpus()[0]?.model ?? 'unknown',
  loadAverage: os.loadavg(),
  unexpectedOutcomes: unexpected,
}
const results = {
  meta,
  floor: { p50: floor.p50, p90: floor.p90, p99: floor.p99, opsPerSec: floor.opsPerSec },
  rows,
  connectionsHeld,
  fleet: { lease: fleetLease, plain: fleetPlain, ratio: fleetLease.claimsPerSec / fleetPlain.claimsPerSec },
  targets,
}

printTable()
for (const file of [jsonPath, svgPath]) mkdirSync(path.dirname(file), { recursive: true })
writeFileSync(jsonPath, `${JSON.stringify(results, null, 2)}\n`)
writeFileSync(svgPath, renderChart(results))
log(`\nwrote ${jsonPath} and ${svgPath}`)
await cleanups.run()
if (unexpected > 0) {
  process.stderr.write(
    `${unexpected} operations had an unexpected outcome (a win where a loss was set up, or the reverse)\n`,
  )
  process.exit(1)
}

function printTable(): void {
  const head = [
    'operation',
    'p50 ms',
    'p90 ms',
    'p99 ms',
    'ops/s',
    'p50 ×',
    'p90 ×',
    'p99 ×',
    'ops/s ×',
    'xids/op',
    'WAL B/op',
    'srv µs/op',
    'conns',
  ]
  const body = rows.map((r) => [
    r.label,
    ms(r.p50),
    ms(r.p90),
    ms(r.p99),
    Math.round(r.opsPerSec).toString(),
    fmt(r.ratio.p50),
    fmt(r.ratio.p90),
    fmt(r.ratio.p99),
    fmt(r.ratio.opsPerSec),
    fmt(r.xidsPerOp),
    fmt(r.walBytesPerOp),
    r.serverCpuUsPerOp === null ? '' : fmt(r.serverCpuUsPerOp),
    r.connectionsHeldDuringTick === null ? '' : String(r.connectionsHeldDuringTick),
  ])
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)))
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
  log('')
  log(line(head))
  for (const b of body) log(line(b))
  log(
    '× = ratio to SELECT 1 in this run; xids and WAL are per operation (a race: per round); srv µs/op = CPU of every server process per operation; conns = connections held while the tick runs',
  )
  for (const r of races) {
    log(
      `${r.label}: ${r.result.rounds} rounds, ${r.result.violations} with more than one winner, ${r.result.empty} with none`,
    )
  }
  log('')
  for (const [kind, f] of [
    ['the library', fleetLease],
    ['plain upsert', fleetPlain],
  ] as const) {
    log(
      `fleet (${f.order}), ${kind}: ${f.jobs} jobs × ${f.replicas} replicas = ${f.claims} claims in ${(f.ms / 1000).toFixed(1)} s: ` +
        `${Math.round(f.claimsPerSec)} claims/s, ${f.winners} won; per claim ${fmt(f.xidsPerClaim)} xids, ${fmt(f.walPerClaim)} B WAL, ` +
        `${f.serverCpuUsPerClaim === null ? '?' : fmt(f.serverCpuUsPerClaim)} µs server CPU, ${fmt(f.clientCpuUsPerClaim)} µs client CPU`,
    )
  }
  log('')
  for (const t of targets) log(`${t.pass ? 'PASS' : 'FAIL'}  ${t.name}: ${t.value}`)
}

function fmt(n: number): string {
  if (n === 0) return '0'
  if (Math.abs(n) >= 100) return n.toFixed(0)
  if (Math.abs(n) >= 10) return n.toFixed(1)
  return n.toFixed(2)
}

function ms(n: number): string {
  return n.toFixed(3)
}

function log(line: string): void {
  process.stdout.write(`${line}\n`)
}
