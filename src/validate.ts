/** Checks of arguments (durations and instants as people type them too): a TypeError naming it, before any query. */
import { types } from 'node:util'
import { argumentError } from './errors.js'
import { formatValue } from './format-value.js'
import type { Queryable } from './types.js'

/** The longest lease, in ms: 2^31 - 1 (about 24.8 days), the statement's `integer` and Node's longest timer. */
export const MAX_LEASE_MS = 2_147_483_647

export function fail(name: string, rule: string, value: unknown): never {
  throw argumentError(name, `must be ${rule}, got ${formatValue(value)}`)
}

const QUERYABLE_RULE =
  'an object with a query(text, params) function (a pg Pool, Client or PoolClient, a PGlite, or fromPostgresJs(sql) for postgres.js)'

export function checkQueryable(db: unknown, name = 'db'): Queryable {
  if (typeof readOrFail(db, 'query', name, QUERYABLE_RULE) !== 'function') fail(name, QUERYABLE_RULE, db)
  return db as Queryable
}

// Looking can throw (a Proxy trap): then the argument is bad like any other.
export function readOrFail(value: unknown, key: string, name: string, rule: string): unknown {
  try {
    return (value as Record<string, unknown> | null | undefined)?.[key]
  } catch {
    return fail(name, rule, value)
  }
}

export function checkJobName(jobName: unknown, name = 'jobName'): string {
  if (typeof jobName !== 'string' || jobName.length === 0) fail(name, 'a non-empty string', jobName)
  // Postgres text cannot hold U+0000.
  if (jobName.includes('\0')) fail(name, 'free of NUL characters', jobName)
  // A lone surrogate (a `u` pattern reads a pair as one) has no UTF-8 form: as U+FFFD, two names would share a row.
  if (/\p{Surrogate}/u.test(jobName)) fail(name, 'well-formed Unicode (no lone surrogate)', jobName)
  // No length limit: only the server knows if a long name fits the key's index (else 54000, before any write).
  return jobName
}

// Rounded to whole ms before the range is checked: `interval * 0.8` is no mistake.
export function checkMs(value: unknown, name: string, max = MAX_LEASE_MS, min = 1): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) fail(name, 'a finite number of milliseconds', value)
  const ms = Math.round(value)
  if (ms < min) fail(name, `at least ${min} ms (after rounding)`, value)
  if (ms > max) fail(name, `at most ${max} ms`, value)
  return ms
}

export function checkFunction<F>(value: unknown, name: string): F {
  return typeof value === 'function' ? (value as F) : fail(name, 'a function', value)
}

type Bag<K extends string> = Partial<Record<K, unknown>>

/** An option bag, read once so a getter cannot give the check one value and the use another; `null` is none. */
export function checkOptions<K extends string>(opts: unknown, keys: readonly K[], name = 'opts'): Bag<K> {
  if (opts === undefined || opts === null) return {}
  if (typeof opts !== 'object') fail(name, 'an object', opts)
  const bag: Bag<K> = {}
  let own: string[] | undefined
  try {
    // Every look at a revoked Proxy throws, Array.isArray included.
    if (!Array.isArray(opts)) own = Object.keys(opts)
    for (const key of keys) bag[key] = (opts as Record<string, unknown>)[key]
  } catch {
    fail(name, 'an object whose properties can be read', opts)
  }
  if (own === undefined) return fail(name, 'an object', opts)
  const unknown = own.find((key) => !(keys as readonly string[]).includes(key))
  if (unknown !== undefined) fail(`${name}.${unknown}`, `one of the known options (${keys.join(', ')})`, unknown)
  return bag
}

// The ms of d, h, m and s, in the order DURATION captures them.
const UNIT_MS = [86_400_000, 3_600_000, 60_000, 1000]
const DURATION = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/
const DURATION_EXAMPLES = 'such as 90s, 15m, 2h, 1d or 1h30m'

/** A duration such as `1h30m` in ms: whole d, h, m, s, largest first, each at most once; not zero. */
export function parseDuration(text: string, name: string): number {
  const match = typeof text === 'string' ? DURATION.exec(text) : null
  if (match === null || text === '') return fail(name, `a duration in whole d, h, m and s, ${DURATION_EXAMPLES}`, text)
  const ms = UNIT_MS.reduce((sum, unit, i) => sum + Number(match[i + 1] ?? 0) * unit, 0)
  if (ms === 0) fail(name, `longer than zero, ${DURATION_EXAMPLES}`, text)
  // Past this, adding the parts loses milliseconds.
  if (!Number.isSafeInteger(ms)) fail(name, `at most ${Number.MAX_SAFE_INTEGER} ms (about 104249991d)`, text)
  return ms
}

// Seconds optional, a zone required; lower-case t and z as RFC 3339 allows.
const ISO_WITH_ZONE = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d+))?)?(?:(Z)|([+-])(\d\d):?(\d\d))$/i
const ISO_WITHOUT_ZONE = /^\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?$/i

// Outside these years either Postgres or `new Date()` writes a year the other cannot read.
export const MIN_MS = 0
export const MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999)

const WITH_ZONE = 'an ISO-8601 date-time with a zone, such as 2026-12-01T06:00:00Z or 2026-12-01T08:00:00+02:00'
const UNTIL_RULE = `a valid Date, or ${WITH_ZONE}`
const ZONE_MISSING = `${WITH_ZONE} (without one it would mean a different instant on every machine)`
const EXISTING =
  'a date and time that exist: a day the month has, hours 00-23, minutes and seconds 00-59, an offset up to ±23:59'

/** An instant (a `Date`, or ISO-8601 text with a zone, of a time that exists, in 1970-9999) as ISO-8601 UTC text. */
export function parseUntil(value: unknown, name: string): string {
  return new Date(parseInstant(value, name)).toISOString()
}

/** {@link parseUntil}'s instant in ms since the epoch: an occurrence is read by the same rules. */
export function parseInstant(value: unknown, name: string): number {
  // A Proxy may throw from any trap, so it is refused before anything looks at it.
  if (types.isProxy(value) || (typeof value !== 'string' && !types.isDate(value))) fail(name, UNTIL_RULE, value)
  // isDate means a real Date (its internal slot): the built-in getTime cannot throw, nor a subclass show two instants.
  const ms = typeof value === 'string' ? isoMs(value, name) : Date.prototype.getTime.call(value)
  if (Number.isNaN(ms)) fail(name, 'a valid Date', value)
  if (ms < MIN_MS || ms > MAX_MS)
    fail(name, 'between 1970-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z in UTC', value)
  return ms
}

// Built from the fields and refused if any rolled over (31 April, 24:00), which Date.parse would let pass.
function isoMs(text: string, name: string): number {
  const match = ISO_WITH_ZONE.exec(text)
  if (match === null) return fail(name, ISO_WITHOUT_ZONE.test(text) ? ZONE_MISSING : UNTIL_RULE, text)
  const fields = match.slice(1, 7).map((part) => Number(part ?? 0))
  const [year, month, day, hour, minute, second] = fields as [number, number, number, number, number, number]
  const [offsetHours, offsetMinutes] = [Number(match[10] ?? 0), Number(match[11] ?? 0)]
  const fraction = Number((match[7] ?? '').slice(0, 3).padEnd(3, '0'))
  // Date.UTC reads years 0-99 as 1900-1999; setting the year afterwards keeps the one written.
  const d = new Date(Date.UTC(2000, month - 1, day, hour, minute, second, fraction))
  d.setUTCFullYear(year)
  const read = [year, d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
  if (read.some((n, i) => n !== fields[i]) || offsetHours > 23 || offsetMinutes > 59) fail(name, EXISTING, text)
  return d.getTime() - (match[9] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000
}
