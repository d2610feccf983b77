/** Argument checks shared by every entry point: a TypeError naming the argument, before any query. */
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
