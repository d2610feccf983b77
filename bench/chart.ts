/**
 * The benchmark's chart, written as plain SVG text (no browser, no dependency): each operation's
 * p50 latency as a multiple of `SELECT 1` on a log scale, and the fleet round's claims per second.
 */

/**
 * The part of the benchmark results the chart draws.
 *
 * @example
 * const input: ChartInput = JSON.parse(readFileSync('bench/results/latest.json', 'utf8'))
 */
export interface ChartInput {
  meta: { date: string; postgres: string; cpus: number; profile: string }
  rows: Array<{
    id: string
    label: string
    group: string
    p50: number
    ratio: { p50: number }
    xidsPerOp: number
    walBytesPerOp: number
  }>
  fleet: {
    lease: {
      claimsPerSec: number
      jobs: number
      replicas: number
      order: string
      xidsPerClaim: number
      walPerClaim: number
    }
    plain: { claimsPerSec: number; xidsPerClaim: number; walPerClaim: number }
    floor?: { claimsPerSec: number }
    /** The library with every replica naming the same occurrence of each job, when it was measured. */
    occurrence?: { claimsPerSec: number; xidsPerClaim: number; walPerClaim: number }
    ratio: number
  }
}

const COLOURS: Record<string, string> = { floor: '#6b7280', library: '#2563eb', peer: '#f59e0b', diagnostic: '#93c5fd' }
const WIDTH = 980
const LABEL_W = 390
const BAR_H = 18
const GAP = 8

/**
 * The chart of one benchmark run, as SVG text.
 *
 * @example
 * writeFileSync('docs/bench.svg', renderChart(results))
 */
export function renderChart(input: ChartInput): string {
  const parts: string[] = []
  const plotW = WIDTH - LABEL_W - 150
  let y = 30
  parts.push(
    text(20, y, 'pg-cron-lease: p50 latency as a multiple of SELECT 1 (log scale, lower is better)', 15, 'bold'),
  )
  y += 20
  parts.push(
    text(
      20,
      y,
      `Postgres ${input.meta.postgres}, ${input.meta.cpus} cores, ${input.meta.date.slice(0, 10)}, ${input.meta.profile} run; absolute times vary by machine`,
      12,
      'normal',
      '#4b5563',
    ),
  )
  y += 20

  const max = Math.max(2, ...input.rows.map((r) => r.ratio.p50))
  const lo = Math.log10(0.5)
  const hi = Math.log10(max * 1.3)
  const x = (ratio: number) => LABEL_W + ((Math.log10(Math.max(ratio, 0.5)) - lo) / (hi - lo)) * plotW
  const top = y + 10
  const bottom = top + input.rows.length * (BAR_H + GAP)
  for (const tick of [1, 3, 10, 30, 100, 300, 1000].filter((t) => t <= max * 1.3)) {
    parts.push(
      `<line x1="${x(tick).toFixed(1)}" y1="${top - 4}" x2="${x(tick).toFixed(1)}" y2="${bottom}" stroke="#e5e7eb"/>`,
    )
    parts.push(text(x(tick) - 8, bottom + 14, `${tick}×`, 11, 'normal', '#6b7280'))
  }
  input.rows.forEach((r, i) => {
    const by = top + i * (BAR_H + GAP)
    const colour = COLOURS[r.group] ?? '#9ca3af'
    parts.push(text(LABEL_W - 8, by + 13, r.label, 12, 'normal', '#111827', 'end'))
    parts.push(
      `<rect x="${LABEL_W}" y="${by}" width="${Math.max(1, x(r.ratio.p50) - LABEL_W).toFixed(1)}" height="${BAR_H}" fill="${colour}" rx="2"/>`,
    )
    parts.push(
      text(x(r.ratio.p50) + 6, by + 13, `${round(r.ratio.p50)}× (${r.p50.toFixed(3)} ms)`, 11, 'normal', '#111827'),
    )
  })
  y = bottom + 40

  parts.push(
    text(
      20,
      y,
      `Fleet round: ${input.fleet.lease.jobs.toLocaleString('en-US')} jobs × ${input.fleet.lease.replicas} replicas (${input.fleet.lease.order}), claims per second (higher is better)`,
      15,
      'bold',
    ),
  )
  y += 14
  const fleetBars: Array<[string, number, string]> = [
    ['pg-cron-lease claim, lease-only', input.fleet.lease.claimsPerSec, COLOURS.library!],
  ]
  if (input.fleet.occurrence) {
    fleetBars.push(['pg-cron-lease claim, naming an occurrence', input.fleet.occurrence.claimsPerSec, COLOURS.library!])
  }
  fleetBars.push(['plain upsert', input.fleet.plain.claimsPerSec, COLOURS.peer!])
  if (input.fleet.floor) {
    fleetBars.push([
      'the floor: the winner known, each loser one probe',
      input.fleet.floor.claimsPerSec,
      COLOURS.floor!,
    ])
  }
  const fleetMax = Math.max(...fleetBars.map(([, value]) => value))
  fleetBars.forEach(([label, value, colour], i) => {
    const by = y + 6 + i * (BAR_H + GAP)
    const w = (value / fleetMax) * plotW
    parts.push(text(LABEL_W - 8, by + 13, label, 12, 'normal', '#111827', 'end'))
    parts.push(
      `<rect x="${LABEL_W}" y="${by}" width="${Math.max(1, w).toFixed(1)}" height="${BAR_H}" fill="${colour}" rx="2"/>`,
    )
    parts.push(
      text(LABEL_W + w + 6, by + 13, `${Math.round(value).toLocaleString('en-US')}/s`, 11, 'normal', '#111827'),
    )
  })
  y += 6 + fleetBars.length * (BAR_H + GAP) + 8
  const occurrenceRatio = input.fleet.occurrence
    ? `, naming an occurrence ${round(input.fleet.occurrence.claimsPerSec / input.fleet.plain.claimsPerSec)}×`
    : ''
  parts.push(
    text(
      LABEL_W,
      y,
      `lease-only ${round(input.fleet.ratio)}× the plain upsert${occurrenceRatio}`,
      12,
      'bold',
      COLOURS.library,
    ),
  )
  y += 34

  // The server-side work, where the claim differs most from the plain upsert.
  parts.push(text(20, y, 'Server work per claim (what a losing replica pays every tick)', 15, 'bold'))
  y += 22
  const cell = (x: number, content: string, weight = 'normal') =>
    parts.push(text(x, y, content, 12, weight, '#111827', 'end'))
  cell(LABEL_W - 8, '')
  cell(LABEL_W + 130, 'transaction IDs', 'bold')
  cell(LABEL_W + 260, 'WAL bytes', 'bold')
  for (const [label, work] of workRows(input)) {
    y += 18
    cell(LABEL_W - 8, label)
    cell(LABEL_W + 130, work.xids)
    cell(LABEL_W + 260, work.wal)
  }
  y += 30
  const legend: Array<[string, string]> = [
    ['floor', 'SELECT 1, the fleet floor'],
    ['library', 'pg-cron-lease'],
    ['peer', 'other patterns'],
    ['diagnostic', 'diagnostics (not what the library sends)'],
  ]
  legend.forEach(([group, label], i) => {
    parts.push(`<rect x="${20 + i * 180}" y="${y - 10}" width="12" height="12" fill="${COLOURS[group]}"/>`)
    parts.push(text(38 + i * 180, y, label, 12, 'normal', '#374151'))
  })
  const height = y + 16
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" role="img" font-family="system-ui, -apple-system, Segoe UI, sans-serif">`,
    `<title>${escapeXml(title(input))}</title>`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n')
}

function workRows(input: ChartInput): Array<[string, { xids: string; wal: string }]> {
  const byId = (id: string) => input.rows.find((r) => r.id === id)
  const fixed = (n: number) => (n === 0 ? '0' : n.toFixed(2))
  const out: Array<[string, { xids: string; wal: string }]> = []
  for (const [id, label] of [
    ['claim_lose', 'pg-cron-lease, losing claim'],
    ['claim_lose_occurrence', 'pg-cron-lease, losing claim naming an occurrence'],
    ['plain_lose', 'plain upsert, losing claim'],
  ] as const) {
    const r = byId(id)
    if (r) out.push([label, { xids: fixed(r.xidsPerOp), wal: r.walBytesPerOp.toFixed(0) }])
  }
  for (const [label, f] of [
    ['pg-cron-lease, fleet round (all claims)', input.fleet.lease],
    ['pg-cron-lease naming an occurrence, fleet round', input.fleet.occurrence],
    ['plain upsert, fleet round (all claims)', input.fleet.plain],
  ] as const) {
    if (f) out.push([label, { xids: fixed(f.xidsPerClaim), wal: f.walPerClaim.toFixed(0) }])
  }
  return out
}

/** The chart's text alternative: the headline numbers in one sentence. */
function title(input: ChartInput): string {
  const ratio = (id: string) => input.rows.find((r) => r.label === id)?.ratio.p50
  const lose = ratio('claim, losing')
  const win = ratio('claim, winning')
  return (
    `pg-cron-lease benchmark, Postgres ${input.meta.postgres}: a losing claim takes ${lose === undefined ? '?' : round(lose)}× ` +
    `a SELECT 1 and a winning claim ${win === undefined ? '?' : round(win)}×; in a fleet round the claim handles ` +
    `${round(input.fleet.ratio)}× the plain upsert's claims per second`
  )
}

function text(
  x: number,
  y: number,
  content: string,
  size: number,
  weight: string,
  fill = '#111827',
  anchor = 'start',
): string {
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" font-size="${size}" font-weight="${weight}" fill="${fill}" text-anchor="${anchor}">${escapeXml(content)}</text>`
}

function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
}

// Two decimals below 10: the targets sit at 1.05, 1.15 and 1.3, and 1.34 must not read as 1.3.
function round(n: number): string {
  return n >= 10 ? n.toFixed(0) : n.toFixed(2)
}
