/**
 * `npm run bench`: the claim measured against the floor (`SELECT 1`) and against the usual ways of
 * doing the same thing, in one process and one run, side by side, with PASS/FAIL per target.
 *
 *   npm run bench -- [--quick] [--source] [--pg 18|14] [--json PATH] [--svg PATH]
 *                    [--fleet-jobs N] [--fleet-order lockstep|staggered] [--previous PATH]
 *
 * It measures the package as users install it: its build (dist/, which `npm run bench` rebuilds
 * first); with `--source` it measures src/ instead. Every case calls that one copy (library.ts).
 *
 * An embedded Postgres 18 by default (`--pg 14` for 14); `DATABASE_URL` targets another server
 * (tables with unique names are created and dropped). PgBouncer, when installed, is started in
 * transaction mode in front of it. Writes a table to the terminal, the numbers to
 * bench/results/latest.json and a chart to docs/bench.svg (with `--quick`: bench/results/quick.json
 * and bench/results/quick.svg, so a quick run never replaces the chart).
 *
 * `--previous PATH` names the previous build: a checkout of it with its dist/ built (e.g. a
 * worktree of the commit before a change), whose cases the cross-build targets read are then
 * measured in this run, one call after another with this build's, on tables its own DDL made; or
 * the results JSON of its own `npm run bench` in the same sitting. Without it those targets are
 * not measured.
 *
 * The cases are in cases.ts, the targets and the table in report.ts.
 */
import { readdirSync, statSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { Cleanups, parseMajor, startServer } from '../dev/lifecycle.ts'
import { findPgBouncer, pgbouncerMissing, pgbouncerVersion, startPgBouncer } from '../dev/pgbouncer.ts'
import {
  bouncerCases,
  type Case,
  comparedCases,
  connectionsHeld,
  type FleetKind,
  type FleetResult,
  fleetRound,
  fleetRoundsInTurns,
  forceFallback,
  historyWrite,
  openBench,
  otelCase,
  otelRounds,
  PROFILES,
  pooledRounds,
  type RaceResult,
  raceCase,
  singleCases,
} from './cases.ts'
import { loadBuildIn, loadCopy, loadInstrumentation, loadLibrary } from './library.ts'
import { Series, shuffler } from './measure.ts'
import {
  type BouncerStatus,
  buildRows,
  buildTargets,
  formatReport,
  type PreviousRun,
  type Results,
  readPrevious,
  writeResults,
} from './report.ts'

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    source: { type: 'boolean', default: false },
    pg: { type: 'string' },
    json: { type: 'string' },
    svg: { type: 'string' },
    'fleet-jobs': { type: 'string' },
    'fleet-order': { type: 'string', default: 'lockstep' },
    previous: { type: 'string' },
  },
})
const quick = values.quick
const profile = { ...PROFILES[quick ? 'quick' : 'full'] }
if (values['fleet-jobs'] !== undefined) {
  const jobs = Number(values['fleet-jobs'])
  if (!Number.isInteger(jobs) || jobs < 1)
    throw new Error(`--fleet-jobs must be a positive whole number, got ${values['fleet-jobs']}`)
  profile.fleetJobs = jobs
}
const fleetOrder = values['fleet-order']
if (fleetOrder !== 'lockstep' && fleetOrder !== 'staggered') {
  throw new Error(`--fleet-order must be lockstep or staggered, got ${fleetOrder}`)
}
const jsonPath = values.json ?? (quick ? 'bench/results/quick.json' : 'bench/results/latest.json')
const svgPath = values.svg ?? (quick ? 'bench/results/quick.svg' : 'docs/bench.svg')
// Read before anything is measured, so a wrong path fails at once: another run's results, or the
// previous build itself, measured in this run.
const previousRun = values.previous?.endsWith('.json') ? readPrevious(values.previous) : null
const previousBuild = values.previous !== undefined && previousRun === null ? await loadBuildIn(values.previous) : null
const { library, file: libraryFile } = await loadLibrary(values.source)
// A build older than the source would measure code that is no longer there.
if (!values.source) {
  const built = statSync(libraryFile).mtimeMs
  const stale = readdirSync('src', { recursive: true, encoding: 'utf8' }).filter(
    (file) => statSync(path.join('src', file)).mtimeMs > built,
  )
  if (stale.length > 0) {
    throw new Error(`${libraryFile} is older than src/${stale[0]}: run npm run build (npm run bench does)`)
  }
}
const loadAtStart = os.loadavg()
const log = (line: string) => process.stdout.write(`${line}\n`)

const cleanups = new Cleanups()
cleanups.install()
const server = await startServer(process.env.DATABASE_URL, parseMajor(values.pg), cleanups)
const bench = await openBench(server, profile, cleanups, library)
const { rows: versionRows } = await bench.observer.query('SHOW server_version')
const serverVersion = String(versionRows[0].server_version)
log(
  `pg-cron-lease bench${quick ? ' (--quick)' : ''}: Postgres ${serverVersion}, Node ${process.versions.node}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'}), load average ${loadAtStart.map((n) => n.toFixed(2)).join(' ')}`,
)
log(`measuring ${libraryFile}`)
if (previousRun) {
  log(`comparing with the previous build's run in ${previousRun.file} (${previousRun.library}, ${previousRun.date})`)
}
if (previousBuild) log(`comparing with the previous build, ${previousBuild.file}, measured in this run beside this one`)
// The previous build's own tables and statements, sent through this build's pools; and, for the
// rows compared with it, this build's on tables of their own too.
const before = previousBuild === null ? null : await openBench(server, profile, cleanups, previousBuild.library, bench)
// A copy of this build loaded apart: the previous build's functions run only in its few cases, and
// code that runs in every other case too is faster by that warmth alone (4–6% against itself).
const beside =
  before === null
    ? null
    : await openBench(server, profile, cleanups, (await loadCopy(values.source, cleanups)).library, bench)
const [THIS, PREVIOUS] = ['this:', 'previous:']
if (server.dataDir) log(`embedded Postgres ${server.major} on 127.0.0.1:${server.port}, data in ${server.dataDir}`)

// PgBouncer with fewer server connections than its pool has clients, so the pool meets a refusal
// while it warms up and the measured claims are the ones sent after the fallback.
const BOUNCER_CLIENTS = 4
let bouncer: BouncerStatus = { version: null, measured: false, reason: pgbouncerMissing() ?? undefined }
let bouncerSingles: Case[] = []
let comparedBouncerPool: pg.Pool | null = null
if (findPgBouncer() !== null) {
  const version = pgbouncerVersion()
  const proxy = await startPgBouncer(server.url, BOUNCER_CLIENTS - 2)
  cleanups.add(() => proxy.stop())
  const bouncerPool = new pg.Pool({ connectionString: proxy.url, max: BOUNCER_CLIENTS })
  bouncerPool.on('error', () => {})
  cleanups.add(() => bouncerPool.end())
  bouncer = { version: version?.join('.') ?? null, measured: true }
  if (await forceFallback(bench, bouncerPool, BOUNCER_CLIENTS)) {
    bouncerSingles = bouncerCases(bench, bouncerPool)
    // The copies compared through the same pool: each learns the fallback on its own, as the pool
    // refuses each the same way.
    if (
      before !== null &&
      beside !== null &&
      (await forceFallback(before, bouncerPool, BOUNCER_CLIENTS)) &&
      (await forceFallback(beside, bouncerPool, BOUNCER_CLIENTS))
    )
      comparedBouncerPool = bouncerPool
  } else {
    bouncer = {
      ...bouncer,
      measured: false,
      reason: `PgBouncer ${bouncer.version} never refused a prepared statement (1.21+ with max_prepared_statements keeps them), so there is no fallback to measure`,
    }
  }
  log(`PgBouncer ${bouncer.version} in transaction mode on 127.0.0.1:${proxy.port}`)
} else log(`PgBouncer: not measured: ${bouncer.reason}`)

const single = [
  ...singleCases(bench),
  ...bouncerSingles,
  ...(before === null || beside === null
    ? []
    : [
        ...comparedCases(beside, comparedBouncerPool, THIS, 'this build'),
        ...comparedCases(before, comparedBouncerPool, PREVIOUS, 'previous build'),
      ]),
]
log('warming up…')
for (const c of single) for (let i = 0; i < profile.warmupOps; i++) await c.op(i)
await bench.observer.query('CHECKPOINT')

// Latency: one call of each case after another, in a new shuffled order every pass, so every
// case sees the same moments of a noisy machine and follows every other case equally often (what
// ran just before, on which connection, changes what a call costs). Ratios between cases are read
// from these samples.
const series = new Map(single.map((c) => [c.id, new Series()]))
log(`single operations: ${profile.latencyMs / 1000} s, one call of each case after another`)
const shuffle = shuffler(0x5eed)
const latencyEnd = Date.now() + profile.latencyMs
while (Date.now() < latencyEnd) {
  for (const c of shuffle(single)) await series.get(c.id)!.time(c.op)
}
// Server work: each case alone for a few blocks, between two marks of the server's counters.
log(`single operations: server work, ${profile.workBlocks} blocks of ${profile.blockMs} ms each`)
// A new shuffled order every block: a case pays for the garbage of the case before it, so in a fixed
// order one build's rows would always follow the same neighbours.
for (let block = 0; block < profile.workBlocks; block++) {
  for (const c of shuffle(single)) {
    await series.get(c.id)!.block(bench.observer, c.op, profile.blockMs, 20, bench.cpu, false)
  }
}
log(
  `losing claim, pg-cron-lease/otel off, on, off again: ${profile.otelRounds} rounds of ${profile.otelBlockMs} ms blocks`,
)
const otel = await otelRounds(bench, await loadInstrumentation(values.source))
const otelShown = otelCase(bench)
series.set(otelShown.id, otel.on)
const measured = [...single]
measured.splice(measured.findIndex((c) => c.id === 'claim_lose') + 1, 0, otelShown)
// Shown in this order: the floor, the library, the other patterns, then the diagnostics.
const GROUPS = ['floor', 'library', 'peer', 'diagnostic']
const shown = measured.sort((a, b) => GROUPS.indexOf(a.group) - GROUPS.indexOf(b.group))

const races: Array<{ id: string; label: string; group: 'library' | 'peer'; result: RaceResult }> = []
for (const [n, kind] of [
  [10, 'lease'],
  [10, 'plain'],
  [50, 'lease'],
  [50, 'plain'],
] as const) {
  log(`race: ${n} claimants, ${kind === 'lease' ? 'the library' : 'plain upsert'}`)
  races.push({
    id: `race${n}_${kind}`,
    label: `${n} claimants racing one job${kind === 'plain' ? ', plain upsert' : ''}`,
    group: kind === 'lease' ? 'library' : 'peer',
    result: await raceCase(bench, n, kind),
  })
}
const held = await connectionsHeld(bench)

// Kinds alternate round by round, so a noisy moment does not fall on one kind only, and each
// kind's rounds are pooled. Beside the previous build, the library's rounds are the two copies'
// (this one's loaded apart too: code that every other case has run is slower in the fleet, by 10%
// against itself), in turns a slice of the jobs at a time: rounds one after the other moved by
// up to 15% against each other on a shared machine, the load moving between them.
const fleetRounds: FleetResult[] = []
const previousRounds: FleetResult[] = []
const rounds = before === null ? profile.fleetRounds : Math.max(profile.fleetRounds, 3)
for (let r = 0; r < rounds; r++) {
  for (const kind of ['plain', 'lease', 'occurrence', 'floor'] as FleetKind[]) {
    log(`fleet ${r + 1} of ${rounds}: ${profile.fleetJobs} jobs × ${profile.fleetReplicas} replicas, ${kind}`)
    if (before === null || beside === null || kind === 'plain' || kind === 'floor') {
      fleetRounds.push(await fleetRound(bench, kind, fleetOrder))
      continue
    }
    const [mine, theirs] = await fleetRoundsInTurns([beside, before], kind, fleetOrder, profile.fleetSlices, r)
    fleetRounds.push(mine!)
    previousRounds.push(theirs!)
    log(
      `  this build ${Math.round(mine!.claimsPerSec)}, the previous build ${Math.round(theirs!.claimsPerSec)} claims/s`,
    )
  }
}
const pooledOf = (rounds: FleetResult[], kind: FleetKind) => pooledRounds(rounds.filter((f) => f.kind === kind))
const pooled = (kind: FleetKind) => pooledOf(fleetRounds, kind)
const fleet = {
  lease: pooled('lease'),
  plain: pooled('plain'),
  occurrence: pooled('occurrence'),
  floor: pooled('floor'),
}

log(
  `history write: one job run ${profile.historyRuns} times, its last ${profile.historyWindow} runs in turn with young jobs' runs`,
)
const history = await historyWrite(bench)

const { floor, rows: every } = buildRows(
  shown.map((c) => ({ c, stats: series.get(c.id)!.stats() })),
  races,
  held,
)
// The rows compared across builds measured here, both builds' on tables of their own: read by the
// targets that compare builds, each as a ratio to the same SELECT 1.
const compared = (prefix: string) =>
  every
    .filter((row) => row.id.startsWith(prefix))
    .map(({ id, label, p50, ratio, clientCpuUsPerOp }) => ({
      id: id.slice(prefix.length),
      label: label.replace(/^[^:]+: /, ''),
      p50,
      ratio,
      clientCpuUsPerOp,
    }))
const rows = every.filter((row) => !row.id.includes(':'))
const previous: PreviousRun | null =
  previousRun ??
  (previousBuild === null
    ? null
    : {
        file: values.previous!,
        date: new Date().toISOString(),
        library: `${previousBuild.file}, measured in this run`,
        profile: quick ? 'quick' : 'full',
        rows: compared(PREVIOUS),
        beside: compared(THIS),
        fleet: {
          lease: pooledOf(previousRounds, 'lease').claimsPerSec,
          occurrence: pooledOf(previousRounds, 'occurrence').claimsPerSec,
          floor: fleet.floor.claimsPerSec,
        },
        fleetRounds: {
          lease: fleetRounds.filter((f) => f.kind === 'lease').map((f) => f.claimsPerSec),
          occurrence: fleetRounds.filter((f) => f.kind === 'occurrence').map((f) => f.claimsPerSec),
        },
      })
const clientCpu = (s: Series) => s.stats().clientCpuUsPerOp!
const perBlock = (s: Series, i: number) => s.blocks[i]!.clientCpuUs / s.blocks[i]!.ops
const otelCost = {
  rounds: profile.otelRounds,
  off: clientCpu(otel.off),
  on: clientCpu(otel.on),
  again: clientCpu(otel.again),
  perRound: otel.on.blocks.map((_, i) => ({
    off: perBlock(otel.off, i),
    on: perBlock(otel.on, i),
    again: perBlock(otel.again, i),
  })),
}
const results: Results = {
  meta: {
    date: new Date().toISOString(),
    profile: quick ? 'quick' : 'full',
    postgres: serverVersion,
    server: process.env.DATABASE_URL ? 'DATABASE_URL' : `embedded ${server.major}`,
    node: process.versions.node,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    loadAverage: { start: loadAtStart, end: os.loadavg() },
    unexpectedOutcomes: bench.unexpected,
    library: libraryFile,
  },
  floor: { p50: floor.p50, p90: floor.p90, p99: floor.p99, opsPerSec: floor.opsPerSec },
  previous,
  rows,
  connectionsHeld: held,
  pgbouncer: bouncer,
  fleet: {
    ...fleet,
    ratio: fleet.lease.claimsPerSec / fleet.plain.claimsPerSec,
    occurrenceRatio: fleet.occurrence.claimsPerSec / fleet.plain.claimsPerSec,
    floorRatio: fleet.floor.claimsPerSec / fleet.plain.claimsPerSec,
    rounds: fleetRounds,
  },
  history,
  otel: otelCost,
  targets: buildTargets(rows, fleet, bouncer, previous, history, otelCost),
}
log(formatReport(results))
writeResults(results, jsonPath, svgPath)
log(`\nwrote ${jsonPath} and ${svgPath}`)
await cleanups.run()
if (bench.unexpected > 0) {
  process.stderr.write(
    `${bench.unexpected} operations had an unexpected outcome (a win where a loss was set up, or the reverse)\n`,
  )
  process.exit(1)
}
