/** `pg-cron-lease status` as a table for people, each job's state marked FAILING, OVERDUE or PAUSED. */
import { escapeControls } from '../escape.js'
import type { LeaseInfo } from '../list-leases.js'
import { ago, duration, msBetween, span } from './human.js'
import type { Paint } from './paint.js'

interface Cell {
  text: string
  paint: (text: string) => string
}

export function renderStatus(leases: LeaseInfo[], table: string, paint: Paint): string {
  if (leases.length === 0) return `No leases in ${table} yet: a job appears after its first claim.\n`
  const checked = leases[0]!.checkedAt
  const plain = (text: string): Cell => ({ text, paint: paint.plain })
  const colour: Record<string, Paint['red']> = { FAILING: paint.red, OVERDUE: paint.red, PAUSED: paint.yellow }
  const rows = leases.map((l): Cell[] => [
    plain(escapeControls(l.jobName)),
    plain(l.holder === null ? '-' : escapeControls(l.holder)),
    // Every age is checkedAt minus another database timestamp, never this machine's clock.
    plain(ago(msBetween(checked, l.claimedAt))),
    expires(l, paint),
    lastRun(l, paint),
    plain(l.lastDurationMs === null ? '-' : duration(l.lastDurationMs)),
    nextDue(l, paint),
    { text: String(l.missed), paint: l.missed > 0 ? paint.yellow : paint.plain },
    {
      text: [l.lastOutcome === 'error' && 'FAILING', l.overdue && 'OVERDUE', l.paused && 'PAUSED']
        .filter(Boolean)
        .join(' '),
      paint: (text) => text.replace(/[A-Z]+/g, (m) => colour[m]?.(m) ?? m),
    },
  ])
  const header = ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES', 'LAST RUN', 'TOOK', 'NEXT DUE', 'MISSED', 'STATE']
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.text.length)))
  const line = (cells: Cell[]) =>
    cells
      .map((c, i) => c.paint(i === cells.length - 1 ? c.text : c.text.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd()
  const count = (n: number, what: string) => (n > 0 ? `, ${n} ${what}` : '')
  const failures = leases
    .filter((l) => l.lastOutcome === 'error')
    .map((l) => `${escapeControls(l.jobName)}: ${escapeControls(l.lastError ?? 'no error text recorded')}`)
  const summary =
    `${leases.length} job${leases.length === 1 ? '' : 's'}, ${leases.filter((l) => l.held).length} held` +
    count(failures.length, 'failing') +
    count(leases.filter((l) => l.overdue).length, 'overdue') +
    count(leases.filter((l) => l.paused).length, 'paused')
  return [
    `${table}: ${summary} (database clock ${checked})`,
    '',
    line(header.map((h) => ({ text: h, paint: paint.bold }))),
    ...rows.map(line),
    ...(failures.length > 0 ? ['', 'Last errors:', ...failures.map((f) => `  ${f}`)] : []),
    '',
  ].join('\n')
}

function expires(l: LeaseInfo, paint: Paint): Cell {
  if (l.leaseUntil === 'infinity') return { text: 'when resumed', paint: paint.yellow }
  if (l.held) return { text: `in ${span(l.remainingMs)}`, paint: paint.green }
  return { text: `expired ${ago(msBetween(l.checkedAt, l.leaseUntil))}`, paint: paint.dim }
}

function lastRun(l: LeaseInfo, paint: Paint): Cell {
  if (l.lastFinishedAt === null) return { text: '-', paint: paint.plain }
  const when = ago(msBetween(l.checkedAt, l.lastFinishedAt))
  if (l.lastOutcome === 'error') return { text: `error ${when}`, paint: paint.red }
  // null: the scheduler could not say how it ended (a node-cron coordinator run).
  return { text: `${l.lastOutcome ?? 'ran'} ${when}`, paint: paint.plain }
}

function nextDue(l: LeaseInfo, paint: Paint): Cell {
  if (l.nextDueAt === null) return { text: '-', paint: paint.plain }
  const ahead = msBetween(l.nextDueAt, l.checkedAt)
  if (ahead > 0) return { text: `in ${span(ahead)}`, paint: paint.plain }
  // Passed: red once listLeases calls it overdue (past the grace), plain while a pause explains it.
  return { text: `due ${ago(-ahead)}`, paint: l.overdue ? paint.red : l.paused ? paint.plain : paint.yellow }
}
