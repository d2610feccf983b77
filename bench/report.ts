/**
 * What `npm run bench` makes of its measurements: a row per operation as ratios to the floor
 * (`SELECT 1` through the same pool in the same run), the performance targets with PASS/FAIL, the
 * table on the terminal, and the files (bench/results/*.json and the chart).
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import type { Case, FleetResult, RaceResult } from './cases.ts'
import { renderChart } from './chart.ts'
import type { Stats } from './measure.ts'

/** One operation's numbers, absolute and as ratios to the floor. */
export interface Row {
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

/** A target: PASS (`true`), FAIL (`false`) or not measured (`null`, with the reason in `value`). */
export interface Target {
  id: string
  name: string
  value: string
  pass: boolean | null
}

/** Whether the PgBouncer cases ran, and if not, why. */
export interface BouncerStatus {
  version: string | null
  measured: boolean
  reason?: string
}

export interface Results {
  meta: {
    date: string
    profile: 'quick' | 'full'
    postgres: string
    server: string
    node: string
    cpus: number
    cpuModel: string
    /** os.loadavg() when the run started and when it ended. */
    loadAverage: { start: number[]; end: number[] }
    unexpectedOutcomes: number
    /** The module measured: dist/index.mjs (the build), or src/index.ts. */
    library: string
  }
  floor: { p50: number; p90: number; p99: number; opsPerSec: number }
  rows: Row[]
  connectionsHeld: Record<string, number>
  pgbouncer: BouncerStatus
  fleet: {
    lease: FleetResult
    plain: FleetResult
    waiting: FleetResult
    occurrence: FleetResult
    /** Claims per second, the library's over the plain upsert's. */
    ratio: number
    /** Every round, in the order run. */
    rounds: FleetResult[]
  }
  targets: Target[]
}

/** Builds the rows: the single operations in case order, then the races. */
export function buildRows(
  cases: Array<{ c: Case; stats: Stats }>,
  races: Array<{ id: string; label: string; group: string; result: RaceResult }>,
  connectionsHeld: Record<string, number>,
): { floor: Stats; rows: Row[] } {
  const floor = cases.find(({ c }) => c.id === 'select1')?.stats
  if (!floor) throw new Error('the bench needs its floor, SELECT 1')
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
  const rows = [
    ...cases.map(({ c, stats }) => toRow(c, stats)),
    ...races.map((r) =>
      toRow({ ...r, unit: 'round' }, r.result, {
        claimants: r.result.claimants,
        violations: r.result.violations,
        emptyRounds: r.result.empty,
      }),
    ),
  ]
  return { floor, rows }
}

/**
 * The targets, each a ratio of two things measured side by side in this run. A target whose
 * inputs were not measured (no PgBouncer, a remote server's CPU) is `pass: null` and says why.
 */
export function buildTargets(
  rows: Row[],
  fleet: { lease: FleetResult; plain: FleetResult; occurrence: FleetResult },
  bouncer: BouncerStatus,
): Target[] {
  const row = (id: string) => rows.find((r) => r.id === id)
  const lose = row('claim_lose')!
  const loseKeyed = row('claim_lose_occurrence')!
  const win = row('claim_win')!.p50 / row('plain_win')!.p50
  const bouncerLose = row('bouncer_claim_lose')
  const bouncerBefore = row('bouncer_claim_lose_unprepared')
  const { lease, plain, occurrence } = fleet
  const fleetRatio = lease.claimsPerSec / plain.claimsPerSec
  const occurrenceRatio = occurrence.claimsPerSec / plain.claimsPerSec
  const cpuRatio =
    lease.serverCpuUsPerClaim !== null && plain.serverCpuUsPerClaim !== null
      ? lease.serverCpuUsPerClaim / plain.serverCpuUsPerClaim
      : null
  const fleetWork = (f: FleetResult) => `${fmt(f.xidsPerClaim)} xids, ${fmt(f.walPerClaim)} B WAL per claim`
  const bouncerName = `PgBouncer ${bouncer.version ?? ''} in transaction mode`.replace('  ', ' ')
  return [
    {
      id: 'losing_claim',
      name: 'losing claim p50 ≤ 1.3× SELECT 1 (pg Pool, default options), with 0 transaction IDs and 0 WAL bytes',
      value: `${limitRatio(lose.ratio.p50)}×, ${fmt(lose.xidsPerOp)} xids, ${fmt(lose.walBytesPerOp)} B WAL`,
      pass: lose.ratio.p50 <= 1.3 && lose.xidsPerOp === 0 && lose.walBytesPerOp === 0,
    },
    {
      id: 'losing_claim_occurrence',
      name: 'losing claim naming an occurrence p50 ≤ 1.3× SELECT 1 (pg Pool, default options), with 0 transaction IDs and 0 WAL bytes',
      value: `${limitRatio(loseKeyed.ratio.p50)}×, ${fmt(loseKeyed.xidsPerOp)} xids, ${fmt(loseKeyed.walBytesPerOp)} B WAL`,
      pass: loseKeyed.ratio.p50 <= 1.3 && loseKeyed.xidsPerOp === 0 && loseKeyed.walBytesPerOp === 0,
    },
    bouncerLose && bouncerBefore
      ? {
          id: 'losing_claim_pgbouncer',
          name: `losing claim through ${bouncerName}, fallen back, p50 ≤ 1.05× the unprepared claim's through it`,
          value: `${limitRatio(bouncerLose.p50 / bouncerBefore.p50)}×`,
          pass: bouncerLose.p50 / bouncerBefore.p50 <= 1.05,
        }
      : {
          id: 'losing_claim_pgbouncer',
          name: 'losing claim through PgBouncer in transaction mode, fallen back, p50 ≤ 1.05× the unprepared claim',
          value: `not measured: ${bouncer.reason ?? 'no PgBouncer'}`,
          pass: null,
        },
    {
      id: 'winning_claim',
      name: "winning claim p50 ≤ 1.15× the plain upsert's win (default options; the upsert as plain text)",
      value: `${limitRatio(win)}×`,
      pass: win <= 1.15,
    },
    {
      id: 'fleet_claims',
      name: `fleet round (${lease.jobs} jobs × ${lease.replicas} replicas, ${lease.order}) claims/s ≥ 2× the plain upsert's`,
      value: `${limitRatio(fleetRatio)}× (${Math.round(lease.claimsPerSec)} vs ${Math.round(plain.claimsPerSec)} claims/s; library ${fleetWork(lease)}; plain upsert ${fleetWork(plain)})`,
      pass: fleetRatio >= 2,
    },
    {
      id: 'fleet_claims_occurrence',
      name: `fleet round naming occurrences (${occurrence.jobs} jobs × ${occurrence.replicas} replicas, ${occurrence.order}) claims/s ≥ 2× the plain upsert's`,
      value: `${limitRatio(occurrenceRatio)}× (${Math.round(occurrence.claimsPerSec)} vs ${Math.round(plain.claimsPerSec)} claims/s; library ${fleetWork(occurrence)})`,
      pass: occurrenceRatio >= 2,
    },
    cpuRatio === null
      ? {
          id: 'fleet_cpu',
          name: "fleet round database CPU per claim ≤ 0.5× the plain upsert's",
          value: 'not measured: the server is not local, so its processes cannot be read',
          pass: null,
        }
      : {
          id: 'fleet_cpu',
          name: "fleet round database CPU per claim ≤ 0.5× the plain upsert's",
          value: `${limitRatio(cpuRatio)}× (${fmt(lease.serverCpuUsPerClaim!)} vs ${fmt(plain.serverCpuUsPerClaim!)} µs, every server process)`,
          pass: cpuRatio <= 0.5,
        },
  ]
}

/** Writes the JSON report and the chart, creating their directories. */
export function writeResults(results: Results, jsonPath: string, svgPath: string): void {
  for (const file of [jsonPath, svgPath]) mkdirSync(path.dirname(file), { recursive: true })
  writeFileSync(jsonPath, `${JSON.stringify(results, null, 2)}\n`)
  writeFileSync(svgPath, renderChart(results))
}

/** The table, the races, the fleet rounds and the targets, as text. */
export function formatReport(results: Results): string {
  const lines: string[] = []
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
  const body = results.rows.map((r) => [
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
  lines.push('', line(head), ...body.map(line))
  lines.push(
    '× = ratio to SELECT 1 through the same pool in this run; xids and WAL are per operation (a race: per round); srv µs/op = CPU of every server process per operation; conns = connections held while the tick runs',
  )
  if (!results.pgbouncer.measured) lines.push(`PgBouncer: not measured: ${results.pgbouncer.reason}`)
  for (const r of results.rows.filter((row) => row.extra)) {
    lines.push(
      `${r.label}: ${r.ops} rounds, ${r.extra!.violations} with more than one winner, ${r.extra!.emptyRounds} with none`,
    )
  }
  lines.push('')
  const names: Record<string, string> = {
    lease: 'the library',
    plain: 'plain upsert',
    waiting: 'claim, NOT EXISTS guard (waits on the row lock)',
    occurrence: 'the library, naming an occurrence',
  }
  const cpu = (n: number | null) => (n === null ? '?' : fmt(n))
  for (const f of results.fleet.rounds) {
    const losers = f.claims - f.winners
    lines.push(
      `fleet (${f.order}), ${names[f.kind]}: ${f.jobs} jobs × ${f.replicas} replicas = ${f.claims} claims in ${(f.ms / 1000).toFixed(1)} s: ` +
        `${Math.round(f.claimsPerSec)} claims/s, ${f.winners} won; per claim ${fmt(f.xidsPerClaim)} xids, ${fmt(f.walPerClaim)} B WAL, ` +
        `${cpu(f.serverCpuUsPerClaim)} µs server CPU (${cpu(f.backendCpuUsPerClaim)} in the claimants' backends), ` +
        `${fmt(f.clientCpuUsPerClaim)} µs client CPU; lockstep losers ${f.lockstepLosers} ` +
        `(${fmt(f.lockstepLosers / f.jobs)} a job, ${fmt((100 * f.lockstepLosers) / Math.max(1, losers))}% of the losers)`,
    )
  }
  lines.push('fleet targets use each kind’s round with the most claims/s', '')
  for (const t of results.targets) {
    lines.push(`${t.pass === null ? 'N/A ' : t.pass ? 'PASS' : 'FAIL'}  ${t.name}: ${t.value}`)
  }
  const { start, end } = results.meta.loadAverage
  lines.push(`load average at start ${start.map(fmt).join(' ')}, at end ${end.map(fmt).join(' ')}`)
  return lines.join('\n')
}

/**
 * A ratio compared with a target's limit, to three decimals: at two, a 1.305× that fails a
 * 1.3× limit would print as 1.30×.
 */
function limitRatio(n: number): string {
  return n.toFixed(3)
}

export function fmt(n: number): string {
  if (n === 0) return '0'
  if (Math.abs(n) >= 100) return n.toFixed(0)
  if (Math.abs(n) >= 10) return n.toFixed(1)
  return n.toFixed(2)
}

function ms(n: number): string {
  return n.toFixed(3)
}
