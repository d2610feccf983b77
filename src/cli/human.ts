/**
 * How values read for a person in the command's text output: names with their control characters
 * made visible, durations, and ages measured between two database timestamps.
 */

// C0 and C1 controls and DEL move the cursor, clear the screen or end a line; the Unicode line
// separators end a line too; the bidirectional overrides and isolates reorder what follows them
// on the screen. A job name, holder or error text is data from the table, and must not do any of
// that to the terminal, nor pass for two lines of output.
const CONTROL = /[\p{Cc}\u2028\u2029\u202a-\u202e\u2066-\u2069]/gu
const SHORT: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/**
 * `text` with every control character written as a visible escape (`\n`, `\x1b`, `\u202e`), so a
 * name shows as one line that cannot change the terminal. Other characters, backslash included,
 * are left as they are. Machine formats (JSON, Prometheus) use their own escaping instead.
 */
export function escapeControl(text: string): string {
  return text.replace(CONTROL, (c) => {
    const code = c.charCodeAt(0)
    return SHORT[c] ?? (code < 0x100 ? `\\x${hex(code, 2)}` : `\\u${hex(code, 4)}`)
  })
}

function hex(code: number, width: number): string {
  return code.toString(16).padStart(width, '0')
}

/**
 * Microseconds since the epoch of a timestamp as the library prints them (ISO-8601 UTC with six
 * fractional digits), exactly: `Date.parse` would drop the last three digits.
 */
function epochMicros(iso: string): number {
  const match = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z$/.exec(iso)
  if (match === null) throw new TypeError(`pg-cron-lease: not a database timestamp: ${JSON.stringify(iso)}`)
  return Date.parse(`${match[1]}Z`) * 1000 + Number((match[2] ?? '').padEnd(6, '0'))
}

/**
 * Milliseconds from `earlier` to `later`, two readings of the database clock (for example a
 * claim and `checkedAt`). This machine's clock plays no part, so a replica or laptop whose clock
 * is off still prints the right age.
 */
export function msBetween(later: string, earlier: string): number {
  return (epochMicros(later) - epochMicros(earlier)) / 1000
}

/** A duration, rounded down to its largest whole unit: "12 s", "3 min", "5 h", "2 d". */
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

/** An age: "just now" under a second, else "3 min ago". */
export function ago(ms: number): string {
  return ms < 1000 ? 'just now' : `${span(ms)} ago`
}

const UNITS = [
  ['d', 86_400_000],
  ['h', 3_600_000],
  ['min', 60_000],
  ['s', 1000],
] as const

/**
 * A measured duration or an interval, finer than {@link span}: "under 1 ms", "850 ms", "4.2 s", "15 s",
 * "1 min 30 s", "1 h", "2 d 3 h" (its two largest units, rounded down).
 */
export function duration(ms: number): string {
  if (ms < 1) return 'under 1 ms'
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return Number.isInteger(ms / 1000) ? `${ms / 1000} s` : `${(Math.floor(ms / 100) / 10).toFixed(1)} s`
  const first = UNITS.findIndex(([, size]) => ms >= size)
  const parts: string[] = []
  let rest = ms
  for (const [unit, size] of UNITS.slice(first, first + 2)) {
    const n = Math.floor(rest / size)
    rest -= n * size
    if (n > 0) parts.push(`${n} ${unit}`)
  }
  return parts.join(' ')
}
