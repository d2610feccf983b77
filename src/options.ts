/** Every option described once (entry points, default, check): errors, DEFAULTS and the fuzz oracle read this table. */
import os from 'node:os'
import { argumentError } from './errors.js'
import { MAX_INTERVAL_MS } from './presets.js'
import { DEFAULT_TABLE, quoteTable, TABLE_RULE } from './sql.js'
import type { HistoryOptions, KeepAlive, LeaseLogger, Queryable } from './types.js'
import {
  checkFunction,
  checkJobName,
  checkMs,
  checkOptions,
  checkQueryable,
  fail,
  MAX_LEASE_MS,
  parseInstant,
  readOrFail,
} from './validate.js'

const TICKS = ['withCronLease', 'leasedTick'] as const
const RUNS = [...TICKS, 'catchUp'] as const
const CLAIMING = [...TICKS, 'leaseCoordinator', 'catchUp'] as const
const ADMIN = ['pauseJob', 'resumeJob', 'releaseLease'] as const
const TABLED = [...CLAIMING, 'listLeases', 'listRuns', ...ADMIN, 'runDoctor', 'createDashboard'] as const
const ALL = [...TABLED, 'drainLeases'] as const

export type EntryPoint = (typeof ALL)[number]

/** Sees every value but `undefined`, which is the row's default. */
type Check<V> = (value: unknown, name: string, context: { leaseMs: number }) => V

// Entry points kept as a tuple type, so OptionsOf can name each entry point's keys.
const row = <D, V, const E extends readonly EntryPoint[]>(entry: E, fallback: D, check: Check<V>) => ({
  in: entry,
  default: fallback,
  check,
  required: false,
})
// A value nobody chose would be a guess: left out, it is checked (and refused) like any other.
const need = <V, const E extends readonly EntryPoint[]>(entry: E, check: Check<V>) =>
  Object.assign(row(entry, undefined as never, check), { required: true })

export type HistoryKeep = Readonly<Required<HistoryOptions>>

// The most either history count may be: the trim reads this many of the job's rows on every write.
const MAX_HISTORY_KEEP = 10_000

// Shorter dashboard tokens can be guessed online, even rate-limited.
const MIN_TOKEN_LENGTH = 16
const MAKE_TOKEN = 'a short token can be guessed; make one with: openssl rand -hex 24'

const HOLDER = `${os.hostname()}:${process.pid}`
const HISTORY: HistoryKeep = Object.freeze({ keep: 100, keepFailed: 20 })
const DRAIN_MS = 10_000
const UTC_MICROS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$/
const LOGGER_RULE = 'an object with optional debug, warn and error functions'

const longMs = (value: unknown, name: string) => checkMs(value, name, Number.MAX_SAFE_INTEGER)
const count = (value: unknown, name: string, min: number, max: number): number =>
  typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max
    ? value
    : fail(name, `a whole number from ${min} to ${max}`, value)
const flag: Check<boolean> = (value, name) => (typeof value === 'boolean' ? value : fail(name, 'true or false', value))
const instant: Check<number | null> = (value, name) => (value === null ? null : parseInstant(value, name))
const unchecked: Check<unknown> = (value) => value

/** The table; its key order is the order checks run and errors are found in. */
export const OPTIONS = {
  // null and '' ask for the default too, as the original package took them.
  holder: row(CLAIMING, HOLDER, (value, name): string => {
    if (value === null || value === '') return HOLDER
    return typeof value === 'string' && !value.includes('\0')
      ? value
      : fail(name, 'a string free of NUL characters', value)
  }),
  table: row(TABLED, DEFAULT_TABLE, (value, name): string => {
    try {
      quoteTable(value as string)
    } catch {
      fail(name, TABLE_RULE, value)
    }
    return value as string
  }),
  // `null` is no logger, as the original package took it.
  logger: row(CLAIMING, undefined, (logger, name): LeaseLogger | undefined => {
    if (logger === null) return undefined
    if (typeof logger !== 'object' && typeof logger !== 'function') fail(name, LOGGER_RULE, logger)
    // The logger is kept, not its methods: a logger may replace them later (pino does on a level change).
    for (const method of ['debug', 'warn', 'error'] as const) {
      const fn = readOrFail(logger, method, name, LOGGER_RULE)
      if (fn !== undefined && typeof fn !== 'function') fail(`${name}.${method}`, 'a function', fn)
    }
    return logger as LeaseLogger
  }),
  keepAlive: row(RUNS, undefined, (value, name, { leaseMs }): KeepAlive => {
    // Unlike a bag, null is refused: a tick that asked for a keep-alive must not outlast its lease without one.
    if (value === null) fail(name, 'an object', value)
    const { beatMs, extendMs } = checkOptions(value, ['beatMs', 'extendMs'], name)
    const extend = checkMs(extendMs, `${name}.extendMs`, leaseMs)
    const beat = checkMs(beatMs, `${name}.beatMs`)
    // A beat must land before the extension it made runs out, or the lease lapses between beats.
    if (beat >= extend) fail(`${name}.beatMs`, `less than ${name}.extendMs (${extend} ms)`, beatMs)
    return { beatMs: beat, extendMs: extend }
  }),
  prepare: row(CLAIMING, true, flag),
  record: row(CLAIMING, true, flag),
  // `false` turns the history off for the job; `true` keeps the defaults.
  history: row(CLAIMING, HISTORY, (value, name): HistoryKeep | false => {
    if (value === true || value === false) return value && HISTORY
    if (value === null) fail(name, 'true, false or an object such as { keep: 100, keepFailed: 20 }', value)
    const { keep = HISTORY.keep, keepFailed = HISTORY.keepFailed } = checkOptions(value, ['keep', 'keepFailed'], name)
    return Object.freeze({
      keep: count(keep, `${name}.keep`, 1, MAX_HISTORY_KEEP),
      keepFailed: count(keepFailed, `${name}.keepFailed`, 0, MAX_HISTORY_KEEP),
    })
  }),
  everyMs: row(RUNS, undefined, (value, name) => (value === null ? undefined : checkMs(value, name, MAX_INTERVAL_MS))),
  clockToleranceMs: row([...TICKS, 'leaseCoordinator', 'runDoctor'], undefined, (value, name) =>
    value === null ? undefined : checkMs(value, name, MAX_LEASE_MS, 0),
  ),
  catchUp: row(['leasedTick', 'leaseCoordinator'], undefined, (value, name): CatchUpWindow => {
    if (value === null) fail(name, 'an object such as { withinMs: 3_600_000 }', value)
    const { withinMs } = checkOptions(value, ['withinMs'], name)
    return { withinMs: longMs(withinMs, `${name}.withinMs`) }
  }),
  withinMs: need(['catchUp'], longMs),
  // Last in their entry points' order; different on every call, so kept out of the compiled bag.
  occurrence: row(['withCronLease'], undefined, instant),
  nextOccurrence: row(['withCronLease', 'catchUp'], undefined, instant),
  onError: row(['leasedTick'], undefined, checkFunction<(error: unknown, jobName: string) => void | Promise<void>>),
  // A function of the task name is checked when it is called.
  leaseMs: row(['leaseCoordinator'], undefined, (value, name): number | ((taskName: string) => number) => {
    if (typeof value === 'function') return value as (taskName: string) => number
    if (typeof value === 'number') return checkMs(value, name)
    return fail(name, 'a number of milliseconds or a function of the task name returning one', value)
  }),
  // One whole missed interval is tolerated, two are not.
  overdueFactor: row(['listLeases'], 2, (value, name) =>
    typeof value === 'number' && Number.isFinite(value) && value >= 1
      ? value
      : fail(name, 'a finite number, at least 1', value),
  ),
  jobName: row(['listRuns'], undefined, checkJobName),
  limit: row(['listRuns'], 100, (value, name) => count(value, name, 1, MAX_HISTORY_KEEP)),
  // Kept as UTC text, so a run's own claimedAt (microseconds) pages exactly.
  before: row(['listRuns'], undefined, (value, name): string => {
    const at = parseInstant(value, name)
    return typeof value === 'string' && UTC_MICROS.test(value) ? value : new Date(at).toISOString()
  }),
  overdueGraceMs: row(['listLeases'], undefined, longMs),
  // Checked by pauseJob itself: until and forMs exclude each other.
  until: row(['pauseJob'], undefined, unchecked),
  forMs: row(['pauseJob'], undefined, unchecked),
  // 0 stops every run in flight at once. The default is a third of Kubernetes' default grace.
  timeoutMs: row(['drainLeases'], DRAIN_MS, (value, name) =>
    value === null ? DRAIN_MS : value === 0 ? 0 : longMs(value, name),
  ),
  // Bounded by default: a crashed holder's open transaction would otherwise hold an admin call for ever.
  lockTimeoutMs: row(ADMIN, 5000, (value, name) => checkMs(value, name)),
  // runDoctor's race: false skips it (a role that may not write); else how many connections race.
  race: row(['runDoctor'], 10, (value, name): number | false => (value === false ? false : count(value, name, 2, 100))),
  rounds: row(['runDoctor'], 20, (value, name) => count(value, name, 1, 1000)),
  connect: row(['runDoctor'], undefined, checkFunction<() => Promise<Queryable>>),
  signal: row(['runDoctor'], undefined, (value, name) =>
    value instanceof AbortSignal ? value : fail(name, 'an AbortSignal', value),
  ),
  onProgress: row(['runDoctor'], undefined, checkFunction<(message: string) => void>),
  db: need(['createDashboard'], checkQueryable),
  basePath: row(['createDashboard'], '', checkBasePath),
  token: row(['createDashboard'], undefined, checkDashboardToken),
  allowedHosts: row(['createDashboard'], Object.freeze([]) as readonly string[], (value, name) => {
    if (!Array.isArray(value)) fail(name, "an array of host names such as ['cron.example.com']", value)
    return value.map((host: unknown): string => {
      // A name as a Host header gives it, less the port: cron.example.com, 10.0.0.5, [fd00::5].
      if (typeof host !== 'string' || !/^([^\s/:?#@[\]]+|\[[0-9a-f:.]+\])$/i.test(host))
        fail(name, 'a host name such as cron.example.com, without port, scheme or path', host)
      return host.toLowerCase()
    })
  }),
  allowActions: row(['createDashboard'], false, flag),
} as const

export type OptionName = keyof typeof OPTIONS
type Default<K extends OptionName> = (typeof OPTIONS)[K]['default']

/** What each option left out is, where that is a value rather than nothing: the CLI shows and uses these. */
export const DEFAULTS = Object.freeze(
  Object.fromEntries(
    Object.entries(OPTIONS).flatMap(([key, { default: value }]) => (value === undefined ? [] : [[key, value]])),
  ),
) as { readonly [K in OptionName as Default<K> extends undefined ? never : K]: Default<K> }

// Kept without its trailing slash: `/` is ''.
export function checkBasePath(value: unknown, name: string): string {
  if (typeof value !== 'string' || !/^\/[^?#\s\\]*$/.test(value) || value.includes('//'))
    fail(name, "a path that starts with '/', such as '/cron', without ?, #, spaces or '//'", value)
  return value.replace(/\/$/, '')
}

// The error gives the token's length, never the token itself.
export function checkDashboardToken(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.trim() === '') fail(name, 'a non-empty string', value)
  const { length } = value.trim()
  if (length < MIN_TOKEN_LENGTH)
    throw argumentError(name, `must be at least ${MIN_TOKEN_LENGTH} characters, got one of ${length}: ${MAKE_TOKEN}`)
  return value
}

/** The `catchUp` option of `leasedTick` and `leaseCoordinator`: how late, in ms, a missed occurrence is made up for. */
export interface CatchUpWindow {
  withinMs: number
}

/** The option names `E` accepts: what the public option interfaces are held to. */
export type OptionsOf<E extends EntryPoint> = {
  [K in OptionName]: E extends (typeof OPTIONS)[K]['in'][number] ? K : never
}[OptionName]

const PER_CALL = ['occurrence', 'nextOccurrence'] as const
type PerCall = (typeof PER_CALL)[number]

export type Compiled = {
  readonly [K in Exclude<OptionName, PerCall>]: ReturnType<(typeof OPTIONS)[K]['check']> | Default<K>
}

type Row = { in: readonly EntryPoint[]; check: Check<unknown>; default: unknown; required: boolean }
const ROWS = OPTIONS as unknown as Record<OptionName, Row>
const KEYS = {} as Record<EntryPoint, readonly OptionName[]>
// What each entry point's options left out compile to, built once: every tick compiles its bag.
const LEFT_OUT = {} as Record<EntryPoint, Record<string, unknown>>
for (const entry of ALL) {
  KEYS[entry] = (Object.keys(OPTIONS) as OptionName[]).filter((key) => ROWS[key].in.includes(entry))
  const kept = KEYS[entry].filter((key) => !(PER_CALL as readonly string[]).includes(key))
  LEFT_OUT[entry] = Object.fromEntries(kept.map((key) => [key, ROWS[key].default]))
}

export const optionsOf = (entry: EntryPoint): readonly OptionName[] => KEYS[entry]

/** `null` is no options, an unknown key a typo; `name` is what the errors call the bag. */
export function compileOptions(entry: EntryPoint, opts: unknown, name = 'opts'): Compiled {
  return compileCall(entry, opts, 0, name).options
}

export function compileCall(entry: EntryPoint, opts: unknown, leaseMs = 0, name = 'opts') {
  const bag = checkOptions(opts, KEYS[entry], name)
  const options: Record<string, unknown> = Object.assign({}, LEFT_OUT[entry])
  const call: Record<PerCall, number | null> = { occurrence: null, nextOccurrence: null }
  // One context and no spread: every won claim compiles its bag, and each object here is measured.
  const context = { leaseMs }
  for (const key of KEYS[entry]) {
    const given = bag[key]
    if (given === undefined && !ROWS[key].required) continue
    const value = ROWS[key].check(given, `${name}.${key}`, context)
    if (key === 'occurrence' || key === 'nextOccurrence') call[key] = value as number | null
    else options[key] = value
  }
  return {
    options: Object.freeze(options) as Compiled,
    occurrence: call.occurrence,
    nextOccurrence: call.nextOccurrence,
  }
}
