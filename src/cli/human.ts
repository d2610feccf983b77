/**
 * How values read for a person in the command's text output: durations, and ages measured between
 * two database timestamps. (Names are escaped by src/escape.ts.)
 */

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
