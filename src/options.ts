/**
 * Every option, described once: which entry points take it, and its check (default included). The
 * unknown-key errors, each entry point's subset and the fuzz oracle all read this table.
 */
import os from 'node:os'
import { MAX_INTERVAL_MS, MAX_LEASE_MS } from './presets.js'
import { parseInstant } from './time-input.js'
import type { HistoryOptions, KeepAlive, LeaseLogger, Queryable } from './types.js'
import {
  checkCount,
  checkFunction,
  checkJobName,
  checkMs,
  checkOptions,
  checkOverdueFactor,
  checkQueryable,
  checkTable,
  fail,
  readOrFail,
} from './validate.js'

const TICKS = ['withCronLease', 'leasedTick'] as const
const RUNS = [...TICKS, 'catchUp'] as const
const CLAIMS = [...TICKS, 'leaseCoordinator'] as const
const CLAIMING = [...CLAIMS, 'catchUp'] as const
const TABLED = [
  ...CLAIMING,
  'listLeases',
  'listRuns',
  'pauseJob',
  'resumeJob',
  'releaseLease',
  'runDoctor',
  'createDashboard',
] as const
const ALL = [...TABLED, 'drainLeases'] as const

/** The public functions that take an option bag. */
export type EntryPoint = (typeof ALL)[number]

interface OptionRow<V> {
  in: readonly EntryPoint[]
  check(value: unknown, name: string, context: { leaseMs: number }): V
}

type OnError = (error: unknown, jobName: string) => void | Promise<void>

// Entry points kept as a tuple type, so OptionsOf can name each entry point's keys.
const row = <V, const E extends readonly EntryPoint[]>(entry: E, check: OptionRow<V>['check']) => ({ in: entry, check })

const instant = (value: unknown, name: string): number | null => (value == null ? null : parseInstant(value, name))

/** How long pauseJob, resumeJob and releaseLease wait for the job's row lock by default, in ms. */
export const DEFAULT_LOCK_TIMEOUT_MS = 5000

/** The table; its key order is the order checks run and errors are found in. */
export const OPTIONS = {
  holder: row(CLAIMING, checkHolder),
  table: row(TABLED, checkTable),
  logger: row(CLAIMING, checkLogger),
  keepAlive: row(RUNS, checkKeepAlive),
  prepare: row(CLAIMING, checkFlag),
  record: row(CLAIMING, checkFlag),
  history: row(CLAIMING, checkHistory),
  everyMs: row(RUNS, (value, name) => (value == null ? undefined : checkMs(value, name, MAX_INTERVAL_MS))),
  clockToleranceMs: row([...CLAIMS, 'runDoctor'], (value, name) =>
    value == null ? undefined : checkMs(value, name, MAX_LEASE_MS, 0),
  ),
  catchUp: row(['leasedTick', 'leaseCoordinator'], (value, name): CatchUpWindow | undefined => {
    if (value === undefined) return undefined
    if (value === null) fail(name, 'an object such as { withinMs: 3_600_000 }', value)
    const { withinMs } = checkOptions(value, ['withinMs'], name)
    return { withinMs: checkMs(withinMs, `${name}.withinMs`, Number.MAX_SAFE_INTEGER) }
  }),
  // Required: a window nobody chose would be a guess.
  withinMs: row(['catchUp'], (value, name) => checkMs(value, name, Number.MAX_SAFE_INTEGER)),
  // Last in their entry points' order; different on every call, so kept out of the compiled bag.
  occurrence: row(['withCronLease'], instant),
  nextOccurrence: row(['withCronLease', 'catchUp'], instant),
  onError: row(['leasedTick'], (value, name) =>
    value === undefined ? undefined : checkFunction<OnError>(value, name),
  ),
  // A function of the task name is checked when it is called.
  leaseMs: row(['leaseCoordinator'], (value, name): number | ((taskName: string) => number) | undefined => {
    if (value === undefined || typeof value === 'function') return value as ((taskName: string) => number) | undefined
    if (typeof value !== 'number') {
      fail(name, 'a number of milliseconds or a function of the task name returning one', value)
    }
    return checkMs(value, name)
  }),
  overdueFactor: row(['listLeases'], checkOverdueFactor),
  jobName: row(['listRuns'], (value, name) => (value === undefined ? undefined : checkJobName(value, name))),
  limit: row(['listRuns'], (value, name) => {
    if (value === undefined) return 100
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_HISTORY_KEEP) {
      fail(name, `a whole number from 1 to ${MAX_HISTORY_KEEP}`, value)
    }
    return value
  }),
  // Kept as UTC text, so a run's own claimedAt (microseconds) pages exactly.
  before: row(['listRuns'], (value, name): string | undefined => {
    if (value === undefined) return undefined
    const ms = parseInstant(value, name)
    return typeof value === 'string' && UTC_MICROS.test(value) ? value : new Date(ms).toISOString()
  }),
  overdueGraceMs: row(['listLeases'], (value, name) =>
    value === undefined ? undefined : checkMs(value, name, Number.MAX_SAFE_INTEGER),
  ),
  // Checked by pauseJob itself: until and forMs exclude each other.
  until: row(['pauseJob'], (value): unknown => value),
  forMs: row(['pauseJob'], (value): unknown => value),
  // 0 stops every run in flight at once. The default is 10 s, a third of Kubernetes' default grace.
  timeoutMs: row(['drainLeases'], (value, name): number => {
    if (value == null) return 10_000
    return value === 0 ? 0 : checkMs(value, name, Number.MAX_SAFE_INTEGER)
  }),
  // Bounded by default: a crashed holder's open transaction would otherwise hold an admin call for ever.
  lockTimeoutMs: row(['pauseJob', 'resumeJob', 'releaseLease'], (value, name) =>
    value === undefined ? DEFAULT_LOCK_TIMEOUT_MS : checkMs(value, name),
  ),
  // runDoctor's race: false skips it (a role that may not write); else how many connections race.
  race: row(['runDoctor'], (value, name): number | false =>
    value === false ? false : value === undefined ? DOCTOR_RACE : checkCount(value, name, 2, 100),
  ),
  rounds: row(['runDoctor'], (value, name) => (value === undefined ? DOCTOR_ROUNDS : checkCount(value, name, 1, 1000))),
  connect: row(['runDoctor'], (value, name) =>
    value === undefined ? undefined : checkFunction<() => Promise<Queryable>>(value, name),
  ),
  signal: row(['runDoctor'], (value, name): AbortSignal | undefined => {
    if (value !== undefined && !(value instanceof AbortSignal)) fail(name, 'an AbortSignal', value)
    return value as AbortSignal | undefined
  }),
  onProgress: row(['runDoctor'], (value, name) =>
    value === undefined ? undefined : checkFunction<(message: string) => void>(value, name),
  ),
  // The dashboard's: checked by createDashboard, which needs them all at once.
  db: row(['createDashboard'], (value, name) => checkQueryable(value, name)),
  basePath: row(['createDashboard'], checkBasePath),
  token: row(['createDashboard'], checkDashboardToken),
  allowedHosts: row(['createDashboard'], (value, name): string[] => {
    if (value === undefined) return []
    if (!Array.isArray(value)) fail(name, "an array of host names such as ['cron.example.com']", value)
    return value.map((host: unknown) => {
      // A name as a Host header gives it, less the port: cron.example.com, 10.0.0.5, [fd00::5].
      if (typeof host !== 'string' || !/^([^\s/:?#@[\]]+|\[[0-9a-f:.]+\])$/i.test(host)) {
        fail(name, 'a host name such as cron.example.com, without port, scheme or path', host)
      }
      return host.toLowerCase()
    })
  }),
  allowActions: row(['createDashboard'], (value, name) => {
    if (value === undefined) return false
    if (typeof value !== 'boolean') fail(name, 'true or false', value)
    return value
  }),
} as const satisfies Record<string, OptionRow<unknown>>

/** How many connections runDoctor's race opens, and how many rounds they race, unless told. */
export const DOCTOR_RACE = 10
export const DOCTOR_ROUNDS = 20

export type OptionName = keyof typeof OPTIONS

const UTC_MICROS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$/

// Read once: os.hostname() is a system call, and the claim path runs on every tick.
let defaultHolder: string | undefined

/** `null` and `''` ask for the default holder too, as the original package took them. */
function checkHolder(holder: unknown, name: string): string {
  if (holder === undefined || holder === null || holder === '') {
    defaultHolder ??= `${os.hostname()}:${process.pid}`
    return defaultHolder
  }
  if (typeof holder !== 'string') fail(name, 'a string', holder)
  if (holder.includes('\0')) fail(name, 'free of NUL characters', holder)
  return holder
}

const LOGGER_RULE = 'an object with optional debug, warn and error functions'

/** `null` is no logger, as the original package took it. */
function checkLogger(logger: unknown, name: string): LeaseLogger | undefined {
  if (logger === undefined || logger === null) return undefined
  if (typeof logger !== 'object' && typeof logger !== 'function') fail(name, LOGGER_RULE, logger)
  // The logger is kept, not its methods: a logger may replace them later (pino does on a level change).
  for (const method of ['debug', 'warn', 'error'] as const) {
    const fn = readOrFail(logger, method, name, LOGGER_RULE)
    if (fn !== undefined && typeof fn !== 'function') fail(`${name}.${method}`, 'a function', fn)
  }
  return logger as LeaseLogger
}

function checkKeepAlive(value: unknown, name: string, { leaseMs }: { leaseMs: number }): KeepAlive | undefined {
  if (value === undefined) return undefined
  // Unlike a bag, null is refused: a tick that asked for a keep-alive must not outlast its lease without one.
  if (value === null) fail(name, 'an object', value)
  const { beatMs, extendMs } = checkOptions(value, ['beatMs', 'extendMs'], name)
  const extend = checkMs(extendMs, `${name}.extendMs`, leaseMs)
  const beat = checkMs(beatMs, `${name}.beatMs`)
  // A beat must land before the extension it made runs out, or the lease lapses between beats.
  if (beat >= extend) fail(`${name}.beatMs`, `less than ${name}.extendMs (${extend} ms)`, beatMs)
  return { beatMs: beat, extendMs: extend }
}

// Both flags are on unless turned off.
function checkFlag(value: unknown, name: string): boolean {
  if (value === undefined) return true
  if (typeof value !== 'boolean') fail(name, 'true or false', value)
  return value
}

/** What a `history` option compiles to: both counts. */
export type HistoryKeep = Readonly<Required<HistoryOptions>>

/** How many runs the history keeps per job when `history` is left out or `true`. */
export const DEFAULT_HISTORY: HistoryKeep = Object.freeze({ keep: 100, keepFailed: 20 })

/** The most either count may be: the trim reads this many of the job's rows on every write. */
export const MAX_HISTORY_KEEP = 10_000

// `false` turns the history off for the job; `true` or left out keeps the defaults.
function checkHistory(value: unknown, name: string): HistoryKeep | false {
  if (value === undefined || value === true) return DEFAULT_HISTORY
  if (value === false) return false
  if (value === null) fail(name, 'true, false or an object such as { keep: 100, keepFailed: 20 }', value)
  const { keep, keepFailed } = checkOptions(value, ['keep', 'keepFailed'], name)
  const count = (n: unknown, key: 'keep' | 'keepFailed', least: number) => {
    if (n === undefined) return DEFAULT_HISTORY[key]
    if (typeof n !== 'number' || !Number.isInteger(n) || n < least || n > MAX_HISTORY_KEEP) {
      fail(`${name}.${key}`, `a whole number from ${least} to ${MAX_HISTORY_KEEP}`, n)
    }
    return n
  }
  return Object.freeze({ keep: count(keep, 'keep', 1), keepFailed: count(keepFailed, 'keepFailed', 0) })
}

/** A path prefix such as `/cron`, kept without its trailing slash: `/` is ''. */
export function checkBasePath(value: unknown, name: string): string {
  if (value === undefined) return ''
  if (typeof value !== 'string' || !/^\/[^?#\s\\]*$/.test(value) || value.includes('//')) {
    fail(name, "a path that starts with '/', such as '/cron', without ?, #, spaces or '//'", value)
  }
  return value.replace(/\/$/, '')
}

/** The shortest dashboard token accepted: shorter ones can be guessed online, even rate-limited. */
export const MIN_TOKEN_LENGTH = 16

/**
 * The dashboard's token: at least {@link MIN_TOKEN_LENGTH} characters. The error gives its length,
 * never the token itself.
 *
 * @example
 * checkDashboardToken(process.env.DASHBOARD_TOKEN, 'opts.token')
 */
export function checkDashboardToken(value: unknown, name: string): string | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'string' || value.trim() === '') fail(name, 'a non-empty string', value)
  if (value.trim().length < MIN_TOKEN_LENGTH) {
    throw new TypeError(
      `pg-cron-lease: ${name} must be at least ${MIN_TOKEN_LENGTH} characters, got one of ${value.trim().length}: a short token can be guessed; make one with: openssl rand -hex 24`,
    )
  }
  return value
}

/**
 * The `catchUp` option of `leasedTick` and `leaseCoordinator`: how late a missed occurrence may
 * still be made up for, in ms.
 *
 * @example
 * const window: CatchUpWindow = { withinMs: 6 * 3_600_000 }
 */
export interface CatchUpWindow {
  withinMs: number
}

/** The option names `E` accepts, as a type: what the public option interfaces are held to. */
export type OptionsOf<E extends EntryPoint> = {
  [K in OptionName]: E extends (typeof OPTIONS)[K]['in'][number] ? K : never
}[OptionName]

export type Compiled = {
  readonly [K in Exclude<OptionName, 'occurrence' | 'nextOccurrence'>]: ReturnType<(typeof OPTIONS)[K]['check']>
}

/** One call's options: the compiled bag, and the per-call values checked for this call. */
export interface CallOptions {
  readonly options: Compiled
  readonly occurrence: number | null
  readonly nextOccurrence: number | null
}

const KEYS = Object.fromEntries(
  ALL.map((entry) => [
    entry,
    (Object.keys(OPTIONS) as OptionName[]).filter((key) => (OPTIONS[key].in as readonly EntryPoint[]).includes(entry)),
  ]),
) as unknown as Record<EntryPoint, readonly OptionName[]>

/** The option names an entry point accepts, in the table's order. */
export function optionsOf(entry: EntryPoint): readonly OptionName[] {
  return KEYS[entry]
}

/** The options of `entry`, checked, defaulted and frozen; `null` is no options, an unknown key a typo. */
export function compileOptions(entry: EntryPoint, opts: unknown): Compiled {
  return compileCall(entry, opts).options
}

// Names in errors, built once: every tick compiles its bag.
const NAMES = Object.fromEntries(Object.keys(OPTIONS).map((key) => [key, `opts.${key}`])) as Record<OptionName, string>

/** {@link compileOptions}, plus the per-call options (an occurrence) checked for this call. */
export function compileCall(entry: EntryPoint, opts: unknown, leaseMs = 0): CallOptions {
  const keys = KEYS[entry]
  const bag = checkOptions(opts, keys)
  const { options: defaults, required } = DEFAULTS[entry] ?? defaultsOf(entry)
  // Most keys are left out: they take their defaults, checked once, and only the keys given are checked here.
  const options: Record<string, unknown> = Object.assign({}, defaults)
  const context = { leaseMs }
  let occurrence: unknown = null
  let nextOccurrence: unknown = null
  for (const key of keys) {
    const given = bag[key]
    if (given === undefined && !required.includes(key)) continue
    const value = (OPTIONS[key] as OptionRow<unknown>).check(given, NAMES[key], context)
    if (key === 'occurrence') occurrence = value
    else if (key === 'nextOccurrence') nextOccurrence = value
    else options[key] = value
  }
  return { options: Object.freeze(options) as Compiled, occurrence, nextOccurrence } as CallOptions
}

// Per entry point, what each option left out compiles to, and the options that cannot be left out.
const DEFAULTS: Partial<Record<EntryPoint, { options: Record<string, unknown>; required: readonly OptionName[] }>> = {}

function defaultsOf(entry: EntryPoint): NonNullable<(typeof DEFAULTS)[EntryPoint]> {
  const options: Record<string, unknown> = {}
  const required: OptionName[] = []
  for (const key of KEYS[entry]) {
    if (key === 'occurrence' || key === 'nextOccurrence') continue
    try {
      options[key] = (OPTIONS[key] as OptionRow<unknown>).check(undefined, NAMES[key], { leaseMs: 0 })
    } catch {
      required.push(key)
    }
  }
  DEFAULTS[entry] = { options, required }
  return DEFAULTS[entry]
}
