/** Text for people, for the CLI, the dashboard and the verdict alike: durations and ages, colours and JSON. */

// Exact: `Date.parse` would drop the last three digits.
function epochMicros(iso: string): number {
  const match = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z$/.exec(iso)
  if (match === null) throw new TypeError(`pg-cron-lease: not a database timestamp: ${JSON.stringify(iso)}`)
  return Date.parse(`${match[1]}Z`) * 1000 + Number((match[2] ?? '').padEnd(6, '0'))
}

export const msBetween = (later: string, earlier: string): number => (epochMicros(later) - epochMicros(earlier)) / 1000

export function span(ms: number): string {
  if (ms === Number.POSITIVE_INFINITY) return 'forever'
  const s = Math.floor(Math.max(0, ms) / 1000)
  if (s < 1) return 'less than 1 s'
  if (s < 60) return `${s} s`
  const min = Math.floor(s / 60)
  if (min < 60) return `${min} min`
  const h = Math.floor(min / 60)
  return h < 48 ? `${h} h` : `${Math.floor(h / 24)} d`
}

export const ago = (ms: number): string => (ms < 1000 ? 'just now' : `${span(ms)} ago`)

const UNITS = Object.entries({ d: 86_400_000, h: 3_600_000, min: 60_000, s: 1000 })

export function duration(ms: number): string {
  if (ms < 1) return 'under 1 ms'
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return Number.isInteger(ms / 1000) ? `${ms / 1000} s` : `${(Math.floor(ms / 100) / 10).toFixed(1)} s`
  const first = UNITS.findIndex(([, size]) => ms >= size)
  const [unit, size] = UNITS[first]!
  const [next, nextSize] = UNITS[first + 1]!
  const n = Math.floor(ms / size)
  const m = Math.floor((ms - n * size) / nextSize)
  return m > 0 ? `${n} ${unit} ${m} ${next}` : `${n} ${unit}`
}

export type Paint = Record<'plain' | 'bold' | 'dim' | 'red' | 'green' | 'yellow', (text: string) => string>

// On a terminal or under FORCE_COLOR; NO_COLOR (any non-empty value) wins over both (https://no-color.org).
export function painter(stream: { isTTY?: boolean }, env: Readonly<Record<string, string | undefined>>): Paint {
  const force = env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '0' && env.FORCE_COLOR !== 'false'
  const on = !env.NO_COLOR && (force || stream.isTTY === true)
  const sgr = (open: number, close: number) => (text: string) => (on ? `\x1b[${open}m${text}\x1b[${close}m` : text)
  const [bold, dim] = [sgr(1, 22), sgr(2, 22)]
  return { plain: (t) => t, bold, dim, red: sgr(31, 39), green: sgr(32, 39), yellow: sgr(33, 39) }
}

// Row 0 is the header; the last cell is not padded, so no line ends in spaces.
export function columns(rows: string[][], paint: (text: string, row: number, column: number) => string): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
  const pad = (cells: string[], row: number) =>
    cells.map((c, i) => paint(i === cells.length - 1 ? c : c.padEnd(widths[i]!), row, i))
  return rows.map((cells, row) => pad(cells, row).join('   ').trimEnd())
}

export const jsonText = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`
