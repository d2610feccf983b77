/**
 * What `npm run bench` makes of its measurements: a row per operation as ratios to the floor
 * (`SELECT 1` through the same pool in the same run), the performance targets with PASS/FAIL, the
 * table on the terminal, and the files (bench/results/*.json and the chart).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import type { Case, FleetResult, HistoryResult, RaceResult } from './cases.ts'
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
  /** This process's CPU per operation, in µs; `null` for a race. */
  clientCpuUsPerOp: number | null
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
  /** The run history's write at one job's run 10 and around its last run. */
  history: HistoryResult
  otel: OtelCost
  targets: Target[]
}

/**
 * The losing claim's client CPU per claim in µs, from rounds of blocks with pg-cron-lease/otel off,
 * on, then off again (cases.ts, otelRounds).
 */
export interface OtelCost {
  rounds: number
  off: number
  on: number
  again: number
  /** Each round's three blocks, client CPU per claim in µs: the target reads them round by round. */
  perRound?: Array<{ off: number; on: number; again: number }>
}

/**
 * Another build that the cross-build targets compare with: measured in this run (`--previous
 * DIR`), or the JSON file its own `npm run bench` wrote (`--previous FILE.json`). Its rows are read
 * by id, as ratios to their run's `SELECT 1`.
 */
/** A row compared across builds; client CPU only where both builds were measured in this run. */
type ComparedRow = Pick<Row, 'id' | 'label' | 'p50' | 'ratio'> & { clientCpuUsPerOp?: number | null }

export interface PreviousRun {
  file: string
  date: string
  library: string
  profile: string
  rows: Array<ComparedRow>
  /**
   * Measured in this run (`--previous DIR`): this build's rows of the same cases, on tables of their
   * own as the previous build's are, which the comparisons read instead of this run's main rows.
   */
  beside?: Array<ComparedRow>
  /** Its fleet rounds' claims per second (each kind's rounds pooled), for the shares of its floor; null when it has none. */
  fleet: { lease: number; occurrence: number; floor: number } | null
  /**
   * This build's fleet rounds beside the previous build's, each kind's claims per second round by
   * round: their spread is the fleet targets' noise band.
   */
  fleetRounds?: { lease: number[]; occurrence: number[] }
}

/**
 * The noise band of a comparison across builds: how far this build measured against a copy of
 * itself in the same run differs from 1 (`a` and `b` the same thing measured twice). A difference
 * inside it, or in this build's favour, passes; the same cost compared with a strict "≥" would be a
 * coin toss.
 *
 * @example
 * noiseBand(1.02, 1.0) // 0.02
 */
export function noiseBand(a: number, b: number): number {
  return Number.isFinite(a) && Number.isFinite(b) && b > 0 ? Math.abs(a / b - 1) : 0
}

/** The spread of the same build's rounds: the largest share one is off their mean. */
export function roundsBand(values: readonly number[]): number {
  if (values.length < 2) return 0
  const mean = values.reduce((sum, v) => sum + v, 0) / values.length
  return Math.max(...values.map((v) => noiseBand(v, mean)))
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
    clientCpuUsPerOp: s.clientCpuUsPerOp,
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
  /** The fleet round's database CPU per claim over the plain upsert's, at most. */
  fleetCpu: 0.4,
  /** The fallen-back claim through PgBouncer over the unprepared claim through it. */
  bouncer: 1.05,
  /** A won run (claim and record, history write included) over the previous build's (each over its SELECT 1). */
  record: 1.1,
  /** The history write around one job's last run over young jobs' at their run 10, timed in turn. */
  historyAge: 1.15,
  /** A losing claim's client CPU with pg-cron-lease/otel on over the same claim's with it off. */
  otelClientCpu: 1.05,
  /** A claim's client CPU over the previous build's, both measured in this run. */
  clientCpuVsPrevious: 1.05,
} as const

/**
 * The targets, each a ratio of two things measured side by side in this run, or, for the two that
 * compare builds, of this run's ratio to its floor with the previous build's (`previous`). A
 * target whose inputs were not measured (no PgBouncer, a remote server's CPU, no previous run) is
 * `pass: null` and says why.
 */
export function buildTargets(
  rows: Row[],
  fleet: { lease: FleetResult; plain: FleetResult; occurrence: FleetResult; floor: FleetResult },
  bouncer: BouncerStatus,
  previous: PreviousRun | null,
  history: HistoryResult,
  otel: OtelCost,
): Target[] {
  const row = (id: string) => rows.find((r) => r.id === id)
  const before = (id: string) => previous?.rows.find((r) => r.id === id)
  // This build's side of a comparison: its own copy measured beside the previous build, if any.
  const beside = (id: string) => previous?.beside?.find((r) => r.id === id) ?? row(id)
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
  // The fleet judged against its own floor round, as the machine bounds the plain upsert's
  // multiple (the floor itself read 2.5× it in one run and 3.13× in another).
  const fleetShare = (id: string, what: string, kind: 'lease' | 'occurrence'): Target => {
    const f = fleet[kind]
    const share = f.claimsPerSec / fleet.floor.claimsPerSec
    const name = `fleet round${what} (${f.jobs} jobs × ${f.replicas} replicas, ${f.order}) claims/s as a share of the floor round's, no lower than the previous build's share, within its noise band`
    const now = `${percent(share)} (${Math.round(f.claimsPerSec)} of ${Math.round(fleet.floor.claimsPerSec)} claims/s; ${limitRatio(f.claimsPerSec / plain.claimsPerSec)}× the plain upsert's, ${fleetWork(f)})`
    if (previous?.fleet == null) {
      const why = previous === null ? noPrevious : `${previous.file} has no fleet rounds`
      return { id, name, value: `${now}; not measured: ${why}`, pass: null }
    }
    const before = previous.fleet[kind] / previous.fleet.floor
    const band = roundsBand(previous.fleetRounds?.[kind] ?? [])
    return {
      id,
      name,
      value: `${now} vs ${percent(before)} (${Math.round(previous.fleet[kind])} of ${Math.round(previous.fleet.floor)} claims/s); noise band ±${percent(band)}, this build's rounds against each other`,
      pass: share >= before * (1 - band),
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
  // This run's row against the previous build's, each as a multiple of its own run's SELECT 1.
  const vsPrevious = (id: string, name: string, nowId: string, thenId: string, limit = 1): Target => {
    const now = beside(nowId)
    const then = before(thenId)
    const bound = limit === 1 ? "no slower than the previous build's" : `≤ ${limit}× the previous build's`
    const named = `${name} ${bound}${thenId === nowId ? '' : ` ${then?.label ?? thenId}`} (p50 over each run's SELECT 1)`
    if (now === undefined || then === undefined) {
      const why =
        previous === null
          ? noPrevious
          : `not measured: ${now === undefined ? 'this run' : previous.file} has no row ${now === undefined ? nowId : thenId}`
      return { id, name: named, value: why, pass: null }
    }
    const ratio = now.ratio.p50 / then.ratio.p50
    // This build's copy measured beside the previous build, against this build's own rows.
    const own = row(nowId)
    const band = own !== undefined && own !== now ? noiseBand(now.ratio.p50, own.ratio.p50) : 0
    return {
      id,
      name: `${named}, within its noise band`,
      value: `${limitRatio(ratio)}× (${limitRatio(now.ratio.p50)}× vs ${limitRatio(then.ratio.p50)}× SELECT 1; ${ms(now.p50)} vs ${ms(then.p50)} ms); noise band ±${percent(band)}, this build against a copy of itself`,
      pass: ratio <= limit * (1 + band),
    }
  }
  // Client CPU per call against the previous build's, both measured in this run's server-work blocks;
  // the band is this build's copy against its own main row.
  const cpuVsPrevious = (id: string, name: string, rowId: string): Target => {
    const now = beside(rowId)
    const then = before(rowId)
    const own = row(rowId)
    const named = `${name} client CPU per call ≤ ${LIMITS.clientCpuVsPrevious}× the previous build's, within its noise band`
    if (!now?.clientCpuUsPerOp || !then?.clientCpuUsPerOp) {
      const why = previous === null ? noPrevious : 'not measured: the previous build was not measured in this run'
      return { id, name: named, value: why, pass: null }
    }
    const ratio = now.clientCpuUsPerOp / then.clientCpuUsPerOp
    const band = own?.clientCpuUsPerOp && own !== now ? noiseBand(now.clientCpuUsPerOp, own.clientCpuUsPerOp) : 0
    return {
      id,
      name: named,
      value: `${limitRatio(ratio)}× (${fmt(now.clientCpuUsPerOp)} vs ${fmt(then.clientCpuUsPerOp)} µs); noise band ±${percent(band)}, this build against a copy of itself`,
      pass: ratio <= LIMITS.clientCpuVsPrevious * (1 + band),
    }
  }
  const previousBouncer = before('bouncer_claim_lose')
  const bouncerBeside = beside('bouncer_claim_lose')
  const bouncerOwn = row('bouncer_claim_lose')
  const bouncerBand =
    bouncerBeside && bouncerOwn && bouncerOwn !== bouncerBeside
      ? noiseBand(bouncerBeside.ratio.p50, bouncerOwn.ratio.p50)
      : 0
  const { young, late } = history
  const age = late.p50 / young.p50
  // Off is both off blocks; their difference is what the same build, measured twice, moves by.
  // Round by round, the median: a collection or a garbage collection that lands in one block moves
  // one round's ratio, not the verdict. Without rounds (an older report), the pooled blocks.
  const otelOff = (otel.off + otel.again) / 2
  const rounds = otel.perRound ?? [otel]
  const otelRatio = median(rounds.map((r) => r.on / ((r.off + r.again) / 2)))
  const otelBand = median(rounds.map((r) => noiseBand(r.again, r.off)))
  return [
    losing('losing_claim', 'losing claim, lease-only,', lose),
    losing('losing_claim_occurrence', 'losing claim naming an occurrence', loseKeyed),
    vsPrevious('losing_claim_vs_previous', 'losing claim, lease-only,', 'claim_lose', 'claim_lose'),
    cpuVsPrevious('losing_claim_cpu_vs_previous', 'losing claim, lease-only,', 'claim_lose'),
    vsPrevious(
      'losing_claim_occurrence_vs_previous',
      'losing claim naming an occurrence',
      'claim_lose_occurrence',
      'claim_lose',
    ),
    {
      id: 'losing_claim_otel',
      name: `losing claim with pg-cron-lease/otel on (the SDK's providers) client CPU ≤ ${LIMITS.otelClientCpu}× with it off, within its noise band`,
      value: `${limitRatio(otelRatio)}× (the median of ${otel.rounds} rounds of blocks off, on, off again; ${fmt(otel.on)} vs ${fmt(otelOff)} µs per claim in all); noise band ±${percent(otelBand)}, off against off again, the median of the rounds`,
      pass: otelRatio <= LIMITS.otelClientCpu * (1 + otelBand),
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
    bouncerBeside && previous !== null && previousBouncer !== undefined
      ? {
          id: 'losing_claim_pgbouncer_vs_previous',
          name: `losing claim through ${bouncerName}, fallen back, no worse than the previous build's (p50 over each run's SELECT 1), within its noise band`,
          value: `${limitRatio(bouncerBeside.ratio.p50)}× vs ${limitRatio(previousBouncer.ratio.p50)}× (${ms(bouncerBeside.p50)} vs ${ms(previousBouncer.p50)} ms); noise band ±${percent(bouncerBand)}, this build against a copy of itself`,
          pass: bouncerBeside.ratio.p50 <= previousBouncer.ratio.p50 * (1 + bouncerBand),
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
    vsPrevious('winning_claim_vs_previous', 'winning claim', 'claim_win', 'claim_win'),
    cpuVsPrevious('winning_claim_cpu_vs_previous', 'winning claim', 'claim_win'),
    vsPrevious(
      'record_vs_previous',
      'a won run, claim and record together, history write included,',
      'claim_win_recorded',
      'claim_win_recorded',
      LIMITS.record,
    ),
    {
      id: 'history_write_age',
      name: `history write around run ${history.runs} of one job p50 ≤ ${LIMITS.historyAge}× young jobs' at their run 10 (runs 5 to 15), timed in turn`,
      value: `${limitRatio(age)}× (${ms(late.p50)} vs ${ms(young.p50)} ms; p90 ${ms(late.p90)} vs ${ms(young.p90)} ms)`,
      pass: age <= LIMITS.historyAge,
    },
    {
      id: 'history_rows',
      name: `one job's rows in the history after ${history.runs} runs ≤ keep + keepFailed (${history.limit})`,
      value: `${history.rows} rows`,
      pass: history.rows <= history.limit,
    },
    fleetShare('fleet_share', ', lease-only,', 'lease'),
    fleetCpu('fleet_cpu', ', lease-only,', fleet.lease),
    fleetShare('fleet_share_occurrence', ' naming occurrences', 'occurrence'),
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
    fleet: ['lease', 'occurrence', 'floor'].every((kind) => Number.isFinite(json.fleet?.[kind]?.claimsPerSec))
      ? {
          lease: json.fleet.lease.claimsPerSec,
          occurrence: json.fleet.occurrence.claimsPerSec,
          floor: json.fleet.floor.claimsPerSec,
        }
      : null,
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
    'claim_win_recorded',
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
    const now = previous.beside?.find((r) => r.id === id) ?? results.rows.find((r) => r.id === id)
    const then = previous.rows.find((r) => r.id === id) ?? (id === 'select1' && previous.beside ? now : undefined)
    if (now === undefined && then === undefined) continue
    lines.push(`  ${(now ?? then)!.label.padEnd(52)} ${cells(now).padEnd(20)} ${cells(then)}`)
  }
  const { lease, occurrence, floor } = results.fleet
  if (previous.fleet !== null) {
    for (const [label, f, then] of [
      ['fleet, lease-only: share of the floor round', lease, previous.fleet.lease],
      ['fleet, naming occurrences: share of the floor round', occurrence, previous.fleet.occurrence],
    ] as const) {
      lines.push(
        `  ${label.padEnd(52)} ${percent(f.claimsPerSec / floor.claimsPerSec).padEnd(20)} ${percent(then / previous.fleet.floor)}`,
      )
    }
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
    'cli µs/op',
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
    r.clientCpuUsPerOp === null ? '' : fmt(r.clientCpuUsPerOp),
    r.connectionsHeldDuringTick === null ? '' : String(r.connectionsHeldDuringTick),
  ])
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)))
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
  lines.push('', line(head), ...body.map(line))
  lines.push(
    '× = ratio to SELECT 1 through the same pool in this run; xids and WAL are per operation (a race: per round); srv µs/op = CPU of every server process per operation; cli µs/op = CPU of this process per operation; conns = connections held while the tick runs',
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
  lines.push('fleet targets pool each kind’s rounds: their claims over the time they took together')
  const { lease, occurrence, floor, plain } = results.fleet
  const ofFloor = (f: FleetResult) => `${Math.round((100 * f.claimsPerSec) / floor.claimsPerSec)}%`
  lines.push(
    `the floor: ${fmt(results.fleet.floorRatio)}× the plain upsert's claims/s (${Math.round(floor.claimsPerSec)} vs ` +
      `${Math.round(plain.claimsPerSec)}); the library reaches ${ofFloor(lease)} of it lease-only, ${ofFloor(occurrence)} naming occurrences`,
  )
  const h = results.history
  const at = (l: { p50: number; p90: number; samples: number }) =>
    `p50 ${ms(l.p50)} ms, p90 ${ms(l.p90)} ms (${l.samples} records)`
  lines.push(
    `history write (the outcome record with the history), one job run ${h.runs} times in ${(h.ms / 1000).toFixed(1)} s ` +
      `(runs 21 to ${h.runs - h.late.samples} in a loop on the server, ${(h.serverRunsMs / 1000).toFixed(1)} s): ` +
      `around its last run ${at(h.late)}; young jobs at runs 5 to 15, in turn with it, ${at(h.young)}; ` +
      `the job's own runs 5 to 15 at the start ${at(h.early)}; ${h.rows} of its rows kept (at most ${h.limit}); ` +
      `the history table ${h.tableKb} kB, its index ${h.indexKb} kB, autovacuumed ${h.autovacuums} times`,
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

function percent(share: number): string {
  return `${(100 * share).toFixed(1)}%`
}

function ms(n: number): string {
  return n.toFixed(3)
}

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y)
  const mid = sorted.length / 2
  return sorted.length % 2 === 1 ? sorted[Math.floor(mid)]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}
