/**
 * Reading a length of time and an end of time as a person writes them: `2h` or `1h30m`, and an
 * ISO-8601 date-time with a zone or a `Date`. Every entry point that takes one (the `pg-cron-lease`
 * command and `pauseJob`) reads it here, so both accept and refuse the same text. Each check runs
 * in JavaScript, before any query.
 */
import { types } from 'node:util'
import { formatValue } from './format-value.js'

const UNIT_MS = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 } as const

const DURATION = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/

const DURATION_EXAMPLES = 'such as 90s, 15m, 2h, 1d or 1h30m'

/**
 * A duration such as `90s`, `15m`, `2h`, `1d` or `1h30m`, in milliseconds: whole numbers of days,
 * hours, minutes and seconds, units from the largest down, each at most once. A day is 24 hours.
 * Throws a `TypeError` naming `name` for anything else, for zero, and for a length that is not a
 * safe integer of milliseconds.
 *
 * @example
 * parseDuration('1h30m', 'opts.for') // 5_400_000
 * parseDuration('90', '--for') // throws TypeError: pg-cron-lease: --for must be a duration in whole d, h, m and s, …, got "90"
 */
export function parseDuration(text: string, name: string): number {
  const match = typeof text === 'string' ? DURATION.exec(text) : null
  if (match === null || text === '') {
    return fail(name, `a duration in whole d, h, m and s, ${DURATION_EXAMPLES}`, text)
  }
  const [, d, h, m, s] = match
  const ms =
    Number(d ?? 0) * UNIT_MS.d + Number(h ?? 0) * UNIT_MS.h + Number(m ?? 0) * UNIT_MS.m + Number(s ?? 0) * UNIT_MS.s
  if (ms === 0) fail(name, `longer than zero, ${DURATION_EXAMPLES}`, text)
  // Past this, adding the parts loses milliseconds, so the length would not be the one written.
  if (!Number.isSafeInteger(ms)) fail(name, `at most ${Number.MAX_SAFE_INTEGER} ms (about 104249991d)`, text)
  return ms
}

// Date, hour and minute; seconds and their fraction optional; a zone required. Lower-case t and z
// are accepted, as RFC 3339 allows.
const ISO_WITH_ZONE = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d+))?)?(?:(Z)|([+-])(\d\d):?(\d\d))$/i
const ISO_WITHOUT_ZONE = /^\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?$/i

/**
 * The instants stored: Postgres prints any timestamptz with a 4-digit year in this range, and
 * `new Date()` reads that text back; outside it one or the other gives a year it cannot read.
 */
const MIN_MS = 0
const MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999)

const UNTIL_RULE =
  'a valid Date, or an ISO-8601 date-time with a zone, such as 2026-12-01T06:00:00Z or 2026-12-01T08:00:00+02:00'

/**
 * The end of a period, as ISO-8601 UTC text (`toISOString()`): a `Date`, or a string holding an
 * ISO-8601 date-time with a zone (`Z`, `+02:00` or `+0200`). Throws a `TypeError` naming `name` and
 * showing the value for anything else: a string without a zone (it would mean a different instant
 * on every machine), a date or time that does not exist (February 30th, 24:00, a 60th second,
 * which `Date.parse` would roll over into the next day or month), an invalid `Date`, a `Proxy`, and
 * an instant before 1970-01-01T00:00:00Z or after 9999-12-31T23:59:59.999Z. Fractions of a
 * second finer than milliseconds are dropped, as `Date` drops them.
 *
 * A `Date` subclass and a `Date` from another realm (a `vm` context, an iframe) are accepted, and
 * read by the built-in `Date.prototype.getTime`: the instant is the one the object holds, whatever
 * methods a subclass overrides, so the check and the use cannot see two different instants.
 *
 * @example
 * parseUntil('2026-12-01T08:00:00+02:00', 'opts.until') // '2026-12-01T06:00:00.000Z'
 * parseUntil(new Date(Date.UTC(2026, 11, 1, 6)), 'opts.until') // '2026-12-01T06:00:00.000Z'
 * parseUntil('2026-12-01T06:00:00', '--until') // throws TypeError: pg-cron-lease: --until must be … with a zone …
 */
export function parseUntil(value: unknown, name: string): string {
  return new Date(parseInstant(value, name)).toISOString()
}

/**
 * The instant a `Date` or ISO-8601 text with a zone names, in ms since the epoch, refused as
 * {@link parseUntil} refuses it: an occurrence is read by the same rules as the end of a pause.
 */
export function parseInstant(value: unknown, name: string): number {
  // A Proxy is never a Date (the built-in methods refuse it) and may throw from any trap, so it is
  // refused before anything looks at it.
  if (types.isProxy(value)) fail(name, UNTIL_RULE, value)
  const ms = types.isDate(value) ? dateMs(value, name) : typeof value === 'string' ? isoMs(value, name) : undefined
  if (ms === undefined) return fail(name, UNTIL_RULE, value)
  if (ms < MIN_MS || ms > MAX_MS) {
    fail(name, 'between 1970-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z in UTC', value)
  }
  return ms
}

function dateMs(value: Date, name: string): number {
  let ms: number
  try {
    ms = Date.prototype.getTime.call(value)
  } catch {
    return fail(name, UNTIL_RULE, value)
  }
  if (Number.isNaN(ms)) fail(name, 'a valid Date', value)
  return ms
}

/** The instant an ISO-8601 text names, computed from its fields so that nothing rolls over. */
function isoMs(text: string, name: string): number {
  const match = ISO_WITH_ZONE.exec(text)
  if (match === null) {
    if (ISO_WITHOUT_ZONE.test(text)) {
      fail(
        name,
        'an ISO-8601 date-time with a zone, such as 2026-12-01T06:00:00Z or 2026-12-01T08:00:00+02:00 (without one it would mean a different instant on every machine)',
        text,
      )
    }
    return fail(name, UNTIL_RULE, text)
  }
  const [year, month, day, hour, minute, second = 0] = match.slice(1, 7).map((part) => Number(part ?? 0)) as number[]
  const [offsetHours, offsetMinutes] = [Number(match[10] ?? 0), Number(match[11] ?? 0)]
  if (
    month! < 1 ||
    month! > 12 ||
    day! < 1 ||
    day! > daysIn(year!, month!) ||
    hour! > 23 ||
    minute! > 59 ||
    second > 59 ||
    offsetHours > 23 ||
    offsetMinutes > 59
  ) {
    fail(
      name,
      'a date and time that exist: a day the month has, hours 00-23, minutes and seconds 00-59, an offset up to ±23:59',
      text,
    )
  }
  const fraction = Number((match[7] ?? '').slice(0, 3).padEnd(3, '0'))
  const offsetMs = (match[9] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000
  // Date.UTC reads years 0-99 as 1900-1999; setting the year afterwards keeps the one written.
  const utc = new Date(Date.UTC(2000, month! - 1, day!, hour!, minute!, second, fraction))
  utc.setUTCFullYear(year!)
  return utc.getTime() - offsetMs
}

function daysIn(year: number, month: number): number {
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0
  return [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]!
}

/** The library's argument error, with a `Date` shown as its instant rather than as JSON. */
function fail(name: string, rule: string, value: unknown): never {
  throw new TypeError(`pg-cron-lease: ${name} must be ${rule}, got ${show(value)}`)
}

function show(value: unknown): string {
  if (types.isProxy(value) || !types.isDate(value)) return formatValue(value)
  const ms = Date.prototype.getTime.call(value)
  return Number.isNaN(ms) ? 'an Invalid Date' : `a Date of ${new Date(ms).toISOString()}`
}
