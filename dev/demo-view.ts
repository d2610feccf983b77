/**
 * What `npm run demo` prints: the live timeline (one row per occurrence, one column per replica)
 * and the summary table. Plain text that reads the same in a pipe; colour only on a terminal and
 * never when NO_COLOR is set (https://no-color.org).
 */
/**
 * How the replicas guard the tick.
 *
 * @example
 * const mode: Mode = 'lease'
 */
export type Mode = 'none' | 'advisory' | 'lease'

/**
 * Colour functions; each returns its text unchanged when colour is off.
 *
 * @example
 * const p = paint(process.stdout); console.log(p.red('DUPLICATE'))
 */
export interface Paint {
  red(text: string): string
  green(text: string): string
  yellow(text: string): string
  dim(text: string): string
  bold(text: string): string
}

/**
 * Colours for `stream`: on for a terminal, off in a pipe or when NO_COLOR is set.
 *
 * @example
 * const p = paint(process.stdout)
 */
export function paint(stream: NodeJS.WriteStream): Paint {
  const noColor = process.env.NO_COLOR !== undefined && process.env.NO_COLOR !== ''
  const on = !noColor && stream.isTTY === true
  const sgr = (open: number, close: number) => (text: string) => (on ? `\x1b[${open}m${text}\x1b[${close}m` : text)
  return { red: sgr(31, 39), green: sgr(32, 39), yellow: sgr(33, 39), dim: sgr(2, 22), bold: sgr(1, 22) }
}

/**
 * One occurrence: what each replica reported (`undefined` = no report).
 *
 * @example
 * const o: Occurrence = { slot: 1_700_000_000, marks: ['ran', 'skipped', undefined] }
 */
export interface Occurrence {
  slot: number
  marks: Array<'ran' | 'skipped' | 'error' | undefined>
}

/**
 * What each mode does, in the words the demo prints.
 *
 * @example
 * console.log(MODE_TEXT.lease)
 */
export const MODE_TEXT: Record<Mode, string> = {
  none: 'plain node-cron: every replica runs every tick',
  advisory: 'pg_try_advisory_lock, unlocked when the tick ends',
  lease: 'withCronLease: one statement, lease held to expiry',
}

/**
 * The header of the timeline: one column per replica.
 *
 * @example
 * say(timelineHeader(4, p)) // "  occurrence  r1 r2 r3 r4"
 */
export function timelineHeader(replicas: number, p: Paint): string {
  const columns = Array.from({ length: replicas }, (_, i) => `r${i + 1}`.padEnd(3)).join('')
  return p.dim(`  occurrence  ${columns}`.trimEnd())
}

/**
 * One occurrence as a row: a mark per replica, and what went wrong in words.
 *
 * @example
 * say(timelineRow({ slot, marks: ['ran', 'ran'] }, p)) // "… ●  ●  DUPLICATE: ran 2 times"
 */
export function timelineRow(occurrence: Occurrence, p: Paint): string {
  const runs = occurrence.marks.filter((m) => m === 'ran').length
  const time = new Date(occurrence.slot * 1000).toISOString().slice(11, 19)
  const mark = (m: Occurrence['marks'][number]) => {
    if (m === 'ran') return runs > 1 ? p.red('●') : p.green('●')
    if (m === 'skipped') return p.dim('·')
    if (m === 'error') return p.yellow('E')
    return p.yellow('?')
  }
  const cells = occurrence.marks.map((m) => `${mark(m)}  `).join('')
  let note = ''
  if (runs > 1) note = p.red(p.bold(`DUPLICATE: ran ${runs} times`))
  else if (runs === 0) note = p.yellow(p.bold('MISSED: no replica ran it'))
  const problems = occurrence.marks.filter((m) => m === 'error' || m === undefined).length
  if (problems > 0) note += p.yellow(` (${problems} replica${problems > 1 ? 's' : ''} failed or did not report)`)
  return `  ${time}    ${cells}${note}`.trimEnd()
}

/**
 * The counts of one mode.
 *
 * @example
 * const s: Summary = summarise('lease', occurrences)
 */
export interface Summary {
  mode: Mode
  occurrences: number
  runs: number
  /** Runs beyond the first of their occurrence. */
  duplicates: number
  /** Occurrences no replica ran. */
  misses: number
  errors: number
}

/**
 * Counts the runs, duplicates and misses of one mode's occurrences.
 *
 * @example
 * summarise('none', [{ slot, marks: ['ran', 'ran'] }]) // { runs: 2, duplicates: 1, misses: 0, … }
 */
export function summarise(mode: Mode, occurrences: Occurrence[]): Summary {
  const summary: Summary = { mode, occurrences: occurrences.length, runs: 0, duplicates: 0, misses: 0, errors: 0 }
  for (const { marks } of occurrences) {
    const runs = marks.filter((m) => m === 'ran').length
    summary.runs += runs
    summary.duplicates += Math.max(0, runs - 1)
    if (runs === 0) summary.misses++
    summary.errors += marks.filter((m) => m === 'error' || m === undefined).length
  }
  return summary
}

/**
 * The summary of every mode that ran, as a table.
 *
 * @example
 * say(summaryTable(summaries, p))
 */
export function summaryTable(rows: Summary[], p: Paint): string {
  const head = `  ${'mode'.padEnd(10)}${'occurrences'.padStart(12)}${'runs'.padStart(7)}${'duplicates'.padStart(12)}${'misses'.padStart(8)}   how the tick is guarded`
  const lines = rows.map((r) => {
    const dup = String(r.duplicates).padStart(12)
    const miss = String(r.misses).padStart(8)
    const errors = r.errors > 0 ? p.yellow(`  (${r.errors} failed reports)`) : ''
    return (
      `  ${r.mode.padEnd(10)}${String(r.occurrences).padStart(12)}${String(r.runs).padStart(7)}` +
      `${r.duplicates > 0 ? p.red(dup) : p.green(dup)}${r.misses > 0 ? p.yellow(miss) : miss}   ${MODE_TEXT[r.mode]}${errors}`
    )
  })
  return [p.bold(head), ...lines].join('\n')
}
