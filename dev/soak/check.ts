/**
 * The history check behind the soak: given every run the replicas recorded (by the database
 * clock), count the duplicates and the misses of each job. Pure functions, so the rules can be
 * tested on hand-made histories.
 *
 * Why spacing and not labels: labelling each run with its occurrence `floor(db_time / interval)`
 * assumes every replica fires at the same phase. A replica whose clock is off by a fraction of the
 * interval fires at another phase; when it wins, one run sits early in a label and the next late
 * in another, so labels show a "duplicate" and a "miss" where the job in fact ran once per
 * interval. So misses are counted from the gaps between consecutive runs, and cross-checked by
 * counting runs per window, neither of which cares about phase.
 */

/** One job of the soak: its schedule and the lease each claim takes. */
export interface JobSpec {
  name: string
  intervalMs: number
  leaseMs: number
}

/**
 * One claim that won, as recorded by the tick: `claimedAt` is the claim's own database time (the
 * lease row's `claimed_at`), in ms since the epoch with microsecond fractions. `outcome` is null
 * when the tick never finished (its process was killed).
 */
export interface RunRecord {
  job: string
  holder: string
  claimedAt: number
  outcome: 'ran' | 'threw' | null
}

/** A replica process SIGKILLed at `at` (database time, ms). */
export interface KillRecord {
  holder: string
  at: number
}

/** The part of the run in which every replica was up and firing, by database time (ms). */
export interface SteadyWindow {
  start: number
  end: number
}

/**
 * Two claims of one job whose `claimed_at` are less than the lease apart, minus this much, are a
 * duplicate. The claim reads the clock once per branch, so `lease_until` is exactly `claimed_at`
 * plus the lease and the next claim can come no earlier; the 10 µs only absorb the rounding of
 * epoch milliseconds held in a double.
 */
const CLOCK_READS_TOLERANCE_MS = 0.01

/** Runs per window of this many intervals: at least `WINDOW_INTERVALS - 1` must have run. */
const WINDOW_INTERVALS = 5

export interface JobReport {
  job: string
  intervalMs: number
  leaseMs: number
  /** Every recorded claim: ran, threw, or unfinished (killed mid-tick). */
  claims: number
  ran: number
  threw: number
  unfinished: number
  /** Claims won per holder: shows every replica, the skewed one too, took part. */
  byHolder: Record<string, number>
  /** Smallest spacing between two consecutive claims, by `claimed_at` (ms); null with < 2 claims. */
  minSpacingMs: number | null
  /** Consecutive claims closer than the lease: must be 0. */
  duplicates: number
  /** Largest gap between consecutive successful runs that touches the steady window, in intervals. */
  maxGapIntervals: number | null
  /** Occurrences of the steady window with no successful run, counted by spacing. */
  missed: number
  /** ...of which a tick threw inside the gap. */
  missedThrew: number
  /** ...of which a replica was killed inside the gap (or left an unfinished tick there). */
  missedKilled: number
  /** ...and the rest, which must be 0. */
  missedUnexplained: number
  /** Windows of `WINDOW_INTERVALS` intervals checked, and how many had too few runs without a fault. */
  windows: number
  shortWindows: number
}

export interface SoakReport {
  jobs: JobReport[]
  duplicates: number
  missedUnexplained: number
  shortWindows: number
  /** True when there is no duplicate, no unexplained miss and no unexplained short window. */
  ok: boolean
}

/**
 * How many occurrences a gap between two successful runs skipped: a gap of about one interval
 * skipped none, about two skipped one. Drift (up to 20%) and a replica firing at another phase
 * stretch a gap to at most about 1.2 intervals, far from the 1.5 where rounding counts a miss.
 *
 * @example
 * missedInGap(1200, 1000) // 0
 * missedInGap(2050, 1000) // 1
 */
export function missedInGap(gapMs: number, intervalMs: number): number {
  return Math.max(0, Math.round(gapMs / intervalMs) - 1)
}

/**
 * Checks one job's history. `allRuns` may hold other jobs' runs and be in any order.
 *
 * @example
 * const r = checkJob({ name: 'a', intervalMs: 1000, leaseMs: 800 }, runs, [], { start, end })
 * if (r.duplicates > 0) throw new Error('ran twice')
 */
export function checkJob(
  job: JobSpec,
  allRuns: readonly RunRecord[],
  kills: readonly KillRecord[],
  window: SteadyWindow,
): JobReport {
  const claims = allRuns.filter((r) => r.job === job.name).sort((a, b) => a.claimedAt - b.claimedAt)
  const ran = claims.filter((r) => r.outcome === 'ran')
  const threw = claims.filter((r) => r.outcome === 'threw')
  const unfinished = claims.filter((r) => r.outcome === null)
  const killedHolders = new Set(kills.map((k) => k.holder))

  // Duplicates: every claim that won counts, whether its tick ran, threw or died; the lease must
  // separate all of them.
  let duplicates = 0
  let minSpacingMs: number | null = null
  for (let i = 1; i < claims.length; i++) {
    const spacing = claims[i]!.claimedAt - claims[i - 1]!.claimedAt
    if (minSpacingMs === null || spacing < minSpacingMs) minSpacingMs = spacing
    if (spacing < job.leaseMs - CLOCK_READS_TOLERANCE_MS) duplicates++
  }

  const between = (list: readonly { claimedAt?: number; at?: number }[], a: number, b: number) =>
    list.filter((x) => {
      const t = x.claimedAt ?? x.at ?? Number.NaN
      return t > a && t < b
    }).length
  const unfinishedByKilled = unfinished.filter((r) => killedHolders.has(r.holder))

  // Misses by spacing: every gap between consecutive successful runs that overlaps the window.
  let missed = 0
  let missedThrew = 0
  let missedKilled = 0
  let maxGap: number | null = null
  for (let i = 1; i < ran.length; i++) {
    const a = ran[i - 1]!.claimedAt
    const b = ran[i]!.claimedAt
    if (b <= window.start || a >= window.end) continue
    const gap = b - a
    if (maxGap === null || gap > maxGap) maxGap = gap
    const skipped = missedInGap(gap, job.intervalMs)
    if (skipped === 0) continue
    missed += skipped
    const byThrow = Math.min(skipped, between(threw, a, b))
    const faults = Math.max(between(unfinishedByKilled, a, b), between(kills, a, b))
    const byKill = Math.min(skipped - byThrow, faults)
    missedThrew += byThrow
    missedKilled += byKill
  }

  // Runs per window: windows of WINDOW_INTERVALS intervals (or the whole steady window when it is
  // shorter), each needing all but one of its occurrences; the one spare absorbs phase.
  const span = window.end - window.start
  const width = job.intervalMs * WINDOW_INTERVALS
  const edges: [number, number][] = []
  if (span < width) edges.push([window.start, window.end])
  else for (let s = window.start; s + width <= window.end; s += width) edges.push([s, s + width])
  let shortWindows = 0
  for (const [s, e] of edges) {
    const need = Math.floor((e - s) / job.intervalMs) - 1
    const count = ran.filter((r) => r.claimedAt >= s && r.claimedAt < e).length
    if (count >= need) continue
    const explained = between(threw, s, e) + Math.max(between(unfinishedByKilled, s, e), between(kills, s, e))
    if (count + explained < need) shortWindows++
  }

  return {
    job: job.name,
    intervalMs: job.intervalMs,
    leaseMs: job.leaseMs,
    claims: claims.length,
    ran: ran.length,
    threw: threw.length,
    unfinished: unfinished.length,
    byHolder: Object.fromEntries(
      [...new Set(claims.map((r) => r.holder))].sort().map((h) => [h, claims.filter((r) => r.holder === h).length]),
    ),
    minSpacingMs,
    duplicates,
    maxGapIntervals: maxGap === null ? null : maxGap / job.intervalMs,
    missed,
    missedThrew,
    missedKilled,
    missedUnexplained: missed - missedThrew - missedKilled,
    windows: edges.length,
    shortWindows,
  }
}

/**
 * Checks every job's history and sums the figures that must be zero.
 *
 * @example
 * const report = checkHistory({ jobs, runs, kills, window: { start, end } })
 * assert.equal(report.ok, true, formatReport(report))
 */
export function checkHistory(input: {
  jobs: readonly JobSpec[]
  runs: readonly RunRecord[]
  kills: readonly KillRecord[]
  window: SteadyWindow
}): SoakReport {
  const jobs = input.jobs.map((job) => checkJob(job, input.runs, input.kills, input.window))
  const duplicates = jobs.reduce((n, j) => n + j.duplicates, 0)
  const missedUnexplained = jobs.reduce((n, j) => n + j.missedUnexplained, 0)
  const shortWindows = jobs.reduce((n, j) => n + j.shortWindows, 0)
  return { jobs, duplicates, missedUnexplained, shortWindows, ok: duplicates + missedUnexplained + shortWindows === 0 }
}

/**
 * The report as a fixed-width table, one row per job, then the claims won per holder.
 *
 * @example
 * console.log(formatReport(checkHistory({ jobs, runs, kills, window })))
 */
export function formatReport(report: SoakReport): string {
  const head = [
    'job',
    'interval',
    'lease',
    'claims',
    'ran',
    'threw',
    'unfinished',
    'min spacing',
    'dups',
    'max gap',
    'missed',
    'm.threw',
    'm.killed',
    'm.unexplained',
    'windows',
    'short',
  ]
  const rows = report.jobs.map((j) => [
    j.job,
    `${j.intervalMs} ms`,
    `${j.leaseMs} ms`,
    String(j.claims),
    String(j.ran),
    String(j.threw),
    String(j.unfinished),
    j.minSpacingMs === null ? '-' : `${j.minSpacingMs.toFixed(1)} ms`,
    String(j.duplicates),
    j.maxGapIntervals === null ? '-' : `${j.maxGapIntervals.toFixed(2)} x`,
    String(j.missed),
    String(j.missedThrew),
    String(j.missedKilled),
    String(j.missedUnexplained),
    String(j.windows),
    String(j.shortWindows),
  ])
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
  const holders = [...new Set(report.jobs.flatMap((j) => Object.keys(j.byHolder)))].sort()
  const wins = report.jobs.map((j) => `${j.job}: ${holders.map((h) => `${h} ${j.byHolder[h] ?? 0}`).join(', ')}`)
  return [
    line(head),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
    '',
    'claims won per holder:',
    ...wins,
  ].join('\n')
}
