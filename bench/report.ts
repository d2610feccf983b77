/**
 * What `npm run bench` makes of its measurements: a row per operation as ratios to the floor
 * (`SELECT 1` through the same pool in the same run), the performance targets with PASS/FAIL, the
 * table on the terminal, and the files (bench/results/*.json and the chart).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
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
  /** The previous build's run (`--previous`), which the cross-build targets compare with; null without one. */
  previous: PreviousRun | null
  floor: { p50: number; p90: number; p99: number; opsPerSec: number }
  rows: Row[]
  connectionsHeld: Record<string, number>
  pgbouncer: BouncerStatus
  fleet: {
    lease: FleetResult
    plain: FleetResult
    occurrence: FleetResult
    /** The round no rule of who sends what can beat (see FleetKind); a diagnostic, no target. */
    floor: FleetResult
    /** Claims per second, the library's (lease-only) over the plain upsert's. */
    ratio: number
    /** Claims per second, the library's naming occurrences over the plain upsert's. */
    occurrenceRatio: number
    /** Claims per second, the floor's over the plain upsert's: as near as any claimant gets to the target. */
    floorRatio: number
    /** Every round, in the order run. */
    rounds: FleetResult[]
  }
  targets: Target[]
}

/**
 * The run of another build that the cross-build targets compare with: the JSON file its own
 * `npm run bench` wrote (`--previous PATH`), run in the same sitting. Only its rows are read, by
 * id, and compared as ratios to each run's own `SELECT 1`, so a moment of the machine that slows
 * both the floor and the claim moves neither ratio.
 */
export interface PreviousRun {
  file: string
  date: string
  library: string
  profile: string
  rows: Array<Pick<Row, 'id' | 'label' | 'p50' | 'ratio'>>
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

/** The limits, from the issue "A losing claim at the floor". */
export const LIMITS = {
  /** A losing claim's p50 over SELECT 1's, lease-only and naming an occurrence. */
  losingClaim: 1.15,
  /** A winning claim's p50 over the plain upsert's win. */
  winningClaim: 1.15,
  /** The fleet round's claims per second over the plain upsert's, at least. */
  fleetClaims: 2.5,
  /** The fleet round's database CPU per claim over the plain upsert's, at most. */
  fleetCpu: 0.4,
  /** The fallen-back claim through PgBouncer over the unprepared claim through it. */
  bouncer: 1.05,
} as const

/**
 * The targets, each a ratio of two things measured side by side in this run, or, for the two that
 * compare builds, of this run's ratio to its floor with the previous build's (`previous`). A
 * target whose inputs were not measured (no PgBouncer, a remote server's CPU, no previous run) is
 * `pass: null` and says why.
 */
export function buildTargets(
  rows: Row[],
  fleet: { lease: FleetResult; plain: FleetResult; occurrence: FleetResult },
  bouncer: BouncerStatus,
  previous: PreviousRun | null = null,
): Target[] {
  const row = (id: string) => rows.find((r) => r.id === id)
  const before = (id: string) => previous?.rows.find((r) => r.id === id)
  const lose = row('claim_lose')!
  const loseKeyed = row('claim_lose_occurrence')!
  const win = row('claim_win')!.p50 / row('plain_win')!.p50
  const bouncerLose = row('bouncer_claim_lose')
  const bouncerUnprepared = row('bouncer_claim_lose_unprepared')
  const { plain } = fleet
  const fleetWork = (f: FleetResult) => `${fmt(f.xidsPerClaim)} xids, ${fmt(f.walPerClaim)} B WAL per claim`
  const bouncerName = `PgBouncer ${bouncer.version ?? ''} in transaction mode`.replace('  ', ' ')
  const noPrevious = "not measured: no previous build's run given (--previous PATH, its bench/results/latest.json)"
  const losing = (id: string, name: string, r: Row): Target => ({
    id,
    name: `${name} p50 ≤ ${LIMITS.losingClaim}× SELECT 1 (pg Pool, default options), with 0 transaction IDs and 0 WAL bytes`,
    value: `${limitRatio(r.ratio.p50)}× (${ms(r.p50)} ms), ${fmt(r.xidsPerOp)} xids, ${fmt(r.walBytesPerOp)} B WAL`,
    pass: r.ratio.p50 <= LIMITS.losingClaim && r.xidsPerOp === 0 && r.walBytesPerOp === 0,
  })
  const fleetClaims = (id: string, what: string, f: FleetResult): Target => {
    const ratio = f.claimsPerSec / plain.claimsPerSec
    return {
      id,
      name: `fleet round${what} (${f.jobs} jobs × ${f.replicas} replicas, ${f.order}) claims/s ≥ ${LIMITS.fleetClaims}× the plain upsert's`,
      value: `${limitRatio(ratio)}× (${Math.round(f.claimsPerSec)} vs ${Math.round(plain.claimsPerSec)} claims/s; library ${fleetWork(f)}; plain upsert ${fleetWork(plain)})`,
      pass: ratio >= LIMITS.fleetClaims,
    }
  }
  const fleetCpu = (id: string, what: string, f: FleetResult): Target => {
    const name = `fleet round${what} database CPU per claim ≤ ${LIMITS.fleetCpu}× the plain upsert's`
    if (f.serverCpuUsPerClaim === null || plain.serverCpuUsPerClaim === null) {
      return { id, name, value: 'not measured: the server is not local, so its processes cannot be read', pass: null }
    }
    const ratio = f.serverCpuUsPerClaim / plain.serverCpuUsPerClaim
    return {
      id,
      name,
      value: `${limitRatio(ratio)}× (${fmt(f.serverCpuUsPerClaim)} vs ${fmt(plain.serverCpuUsPerClaim)} µs, every server process)`,
      pass: ratio <= LIMITS.fleetCpu,
    }
  }
  const previousLose = before('claim_lose')
  const previousBouncer = before('bouncer_claim_lose')
  return [
    losing('losing_claim', 'losing claim, lease-only,', lose),
    losing('losing_claim_occurrence', 'losing claim naming an occurrence', loseKeyed),
    previous === null || previousLose === undefined
      ? {
          id: 'losing_claim_occurrence_vs_previous',
          name: "losing claim naming an occurrence no slower than the previous build's lease-only losing claim",
          value: previous === null ? noPrevious : `not measured: ${previous.file} has no row claim_lose`,
          pass: null,
        }
      : {
          id: 'losing_claim_occurrence_vs_previous',
          name: "losing claim naming an occurrence no slower than the previous build's lease-only losing claim (p50 over each run's SELECT 1)",
          value: `${limitRatio(loseKeyed.ratio.p50)}× vs ${limitRatio(previousLose.ratio.p50)}× (${ms(loseKeyed.p50)} vs ${ms(previousLose.p50)} ms)`,
          pass: loseKeyed.ratio.p50 <= previousLose.ratio.p50,
        },
    bouncerLose && bouncerUnprepared
      ? {
          id: 'losing_claim_pgbouncer',
          name: `losing claim through ${bouncerName}, fallen back, p50 ≤ ${LIMITS.bouncer}× the unprepared claim's through it`,
          value: `${limitRatio(bouncerLose.p50 / bouncerUnprepared.p50)}× (${ms(bouncerLose.p50)} vs ${ms(bouncerUnprepared.p50)} ms)`,
          pass: bouncerLose.p50 / bouncerUnprepared.p50 <= LIMITS.bouncer,
        }
      : {
          id: 'losing_claim_pgbouncer',
          name: `losing claim through PgBouncer in transaction mode, fallen back, p50 ≤ ${LIMITS.bouncer}× the unprepared claim`,
          value: `not measured: ${bouncer.reason ?? 'no PgBouncer'}`,
          pass: null,
        },
    bouncerLose && previous !== null && previousBouncer !== undefined
      ? {
          id: 'losing_claim_pgbouncer_vs_previous',
          name: `losing claim through ${bouncerName}, fallen back, no worse than the previous build's (p50 over each run's SELECT 1)`,
          value: `${limitRatio(bouncerLose.ratio.p50)}× vs ${limitRatio(previousBouncer.ratio.p50)}× (${ms(bouncerLose.p50)} vs ${ms(previousBouncer.p50)} ms)`,
          pass: bouncerLose.ratio.p50 <= previousBouncer.ratio.p50,
        }
      : {
          id: 'losing_claim_pgbouncer_vs_previous',
          name: "losing claim through PgBouncer in transaction mode, fallen back, no worse than the previous build's",
          value: !bouncerLose
            ? `not measured: ${bouncer.reason ?? 'no PgBouncer'}`
            : previous === null
              ? noPrevious
              : `not measured: ${previous.file} has no row bouncer_claim_lose`,
          pass: null,
        },
    {
      id: 'winning_claim',
      name: `winning claim p50 ≤ ${LIMITS.winningClaim}× the plain upsert's win (default options, the whole call timed, so a probe sent first would count; the upsert as plain text)`,
      value: `${limitRatio(win)}× (${ms(row('claim_win')!.p50)} vs ${ms(row('plain_win')!.p50)} ms)`,
      pass: win <= LIMITS.winningClaim,
    },
    fleetClaims('fleet_claims', ', lease-only,', fleet.lease),
    fleetCpu('fleet_cpu', ', lease-only,', fleet.lease),
    fleetClaims('fleet_claims_occurrence', ' naming occurrences', fleet.occurrence),
    fleetCpu('fleet_cpu_occurrence', ' naming occurrences', fleet.occurrence),
  ]
}

/**
 * Reads the previous build's run for the cross-build targets: the JSON its `npm run bench` wrote.
 *
 * @example
 * const previous = readPrevious('/work/wt-prev/bench/results/latest.json')
 */
export function readPrevious(file: string): PreviousRun {
  const json = JSON.parse(readFileSync(file, 'utf8'))
  if (!Array.isArray(json?.rows) || !json.rows.some((r: { id?: unknown }) => r.id === 'select1')) {
    throw new Error(`${file} is not a bench result (no rows, or no SELECT 1)`)
  }
  return {
    file,
    date: String(json.meta?.date ?? ''),
    library: String(json.meta?.library ?? ''),
    profile: String(json.meta?.profile ?? ''),
    rows: json.rows.map((r: Row) => ({ id: r.id, label: r.label, p50: r.p50, ratio: r.ratio })),
  }
}

/**
 * The rows the targets name, this run's beside the previous build's, as text: p50 in ms and as a
 * multiple of each run's SELECT 1.
 */
export function formatComparison(results: Results): string[] {
  const previous = results.previous
  if (previous === null) return []
  const ids = [
    'select1',
    'claim_lose',
    'claim_lose_occurrence',
    'claim_win',
    'plain_win',
    'bouncer_claim_lose',
    'bouncer_claim_lose_unprepared',
  ]
  const lines = [
    '',
    `this build (${results.meta.library}, ${results.meta.profile}) beside the previous build (${previous.file}: ${previous.library}, ${previous.profile}, ${previous.date})`,
  ]
  const cells = (r: { p50: number; ratio: { p50: number } } | undefined) =>
    r === undefined ? 'not measured' : `${ms(r.p50)} ms ${fmt(r.ratio.p50).padStart(5)}×`
  for (const id of ids) {
    const now = results.rows.find((r) => r.id === id)
    const then = previous.rows.find((r) => r.id === id)
    if (now === undefined && then === undefined) continue
    lines.push(`  ${(now ?? then)!.label.padEnd(52)} ${cells(now).padEnd(20)} ${cells(then)}`)
  }
  return lines
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
    occurrence: 'the library, naming an occurrence',
    floor: 'the floor (a winner chosen in advance claims, each other replica probes)',
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
  lines.push('fleet targets use each kind’s round with the most claims/s')
  const { lease, occurrence, floor, plain } = results.fleet
  const ofFloor = (f: FleetResult) => `${Math.round((100 * f.claimsPerSec) / floor.claimsPerSec)}%`
  lines.push(
    `the floor: ${fmt(results.fleet.floorRatio)}× the plain upsert's claims/s (${Math.round(floor.claimsPerSec)} vs ` +
      `${Math.round(plain.claimsPerSec)}); the library reaches ${ofFloor(lease)} of it lease-only, ${ofFloor(occurrence)} naming occurrences`,
  )
  lines.push(...formatComparison(results), '')
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
