/**
 * Every option, described once: which entry points take it, and its check (default included). The
 * unknown-key errors, each entry point's subset and the fuzz oracle all read this table.
 */
import { MAX_INTERVAL_MS, MAX_LEASE_MS } from './presets.js'
import { parseInstant } from './time-input.js'
import type { KeepAlive, LeaseLogger } from './types.js'
import {
  checkBoolean,
  checkHolder,
  checkKeepAlive,
  checkLogger,
  checkMs,
  checkOptions,
  checkOverdueFactor,
  checkTable,
  fail,
} from './validate.js'

/** The public functions that take an option bag. */
export type EntryPoint =
  | 'withCronLease'
  | 'leasedTick'
  | 'leaseCoordinator'
  | 'catchUp'
  | 'listLeases'
  | 'pauseJob'
  | 'resumeJob'
  | 'releaseLease'

interface CheckContext {
  leaseMs: number
}

interface OptionRow<V> {
  in: readonly EntryPoint[]
  check(value: unknown, name: string, context: CheckContext): V
  /** Different on every call (an occurrence): checked each call, kept out of the compiled bag. */
  perCall?: true
}

const TICKS = ['withCronLease', 'leasedTick'] as const
const RUNS = [...TICKS, 'catchUp'] as const
const CLAIMS = [...TICKS, 'leaseCoordinator'] as const
const ALL = [
  ...CLAIMS,
  'catchUp',
  'listLeases',
  'pauseJob',
  'resumeJob',
  'releaseLease',
] as const satisfies readonly EntryPoint[]

type OnError = (error: unknown, jobName: string) => void | Promise<void>

// Entry points kept as a tuple type, so OptionsOf can name each entry point's keys.
const row = <V, const E extends readonly EntryPoint[]>(entry: E, check: OptionRow<V>['check']) => ({ in: entry, check })
const perCall = <V, const E extends readonly EntryPoint[]>(entry: E, check: OptionRow<V>['check']) =>
  ({ in: entry, check, perCall: true }) as const

const instant = (value: unknown, name: string): number | null =>
  value === undefined || value === null ? null : parseInstant(value, name)

/** The table; its key order is the order checks run and errors are found in. */
export const OPTIONS = {
  holder: row([...CLAIMS, 'catchUp'], (value, name): string => checkHolder(value, name)),
  table: row(ALL, (value, name): string => checkTable(value, name)),
  logger: row([...CLAIMS, 'catchUp'], (value, name): LeaseLogger | undefined => checkLogger(value, name)),
  keepAlive: row(RUNS, (value, name, { leaseMs }): KeepAlive | undefined => checkKeepAlive(value, leaseMs, name)),
  prepare: row([...CLAIMS, 'catchUp'], (value, name): boolean => checkBoolean(value, name, true)),
  record: row([...CLAIMS, 'catchUp'], (value, name): boolean => checkBoolean(value, name, true)),
  everyMs: row(RUNS, (value, name): number | undefined =>
    value == null ? undefined : checkMs(value, name, MAX_INTERVAL_MS),
  ),
  clockToleranceMs: row(CLAIMS, (value, name): number | undefined => {
    if (value == null) return undefined
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_LEASE_MS) {
      fail(name, `a whole number of milliseconds from 0 to ${MAX_LEASE_MS}`, value)
    }
    return value
  }),
  catchUp: row(['leasedTick', 'leaseCoordinator'], (value, name): CatchUpWindow | undefined => {
    if (value === undefined) return undefined
    if (value === null) fail(name, 'an object such as { withinMs: 3_600_000 }', value)
    return {
      withinMs: checkMs(checkOptions(value, ['withinMs'], name).withinMs, `${name}.withinMs`, Number.MAX_SAFE_INTEGER),
    }
  }),
  // Required: a window nobody chose would be a guess.
  withinMs: row(['catchUp'], (value, name): number => checkMs(value, name, Number.MAX_SAFE_INTEGER)),
  occurrence: perCall(['withCronLease'], instant),
  nextOccurrence: perCall(['withCronLease', 'catchUp'], instant),
  onError: row(['leasedTick'], (value, name): OnError | undefined => {
    if (value !== undefined && typeof value !== 'function') fail(name, 'a function', value)
    return value as OnError | undefined
  }),
  // A function of the task name is checked when it is called.
  leaseMs: row(['leaseCoordinator'], (value, name): number | ((taskName: string) => number) | undefined => {
    if (value === undefined || typeof value === 'function') return value as ((taskName: string) => number) | undefined
    if (typeof value !== 'number') {
      fail(name, 'a number of milliseconds or a function of the task name returning one', value)
    }
    return checkMs(value, name)
  }),
  overdueFactor: row(['listLeases'], (value, name): number => checkOverdueFactor(value, name)),
  overdueGraceMs: row(['listLeases'], (value, name): number | undefined =>
    value === undefined ? undefined : checkMs(value, name, Number.MAX_SAFE_INTEGER),
  ),
  // Checked by pauseJob itself: until and forMs exclude each other.
  until: row(['pauseJob'], (value): unknown => value),
  forMs: row(['pauseJob'], (value): unknown => value),
} as const satisfies Record<string, OptionRow<unknown>>

export type OptionName = keyof typeof OPTIONS

type PerCallName = { [K in OptionName]: (typeof OPTIONS)[K] extends { perCall: true } ? K : never }[OptionName]

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
  readonly [K in Exclude<OptionName, PerCallName>]: ReturnType<(typeof OPTIONS)[K]['check']>
}

/** One call's options: the compiled bag, and the per-call values checked for this call. */
export interface CallOptions {
  readonly options: Compiled
  readonly occurrence: number | null
  readonly nextOccurrence: number | null
}

/** The option names an entry point accepts, in the table's order. */
export function optionsOf(entry: EntryPoint): readonly OptionName[] {
  return KEYS[entry]
}

const KEYS = Object.fromEntries(
  ALL.map((entry) => [
    entry,
    (Object.keys(OPTIONS) as OptionName[]).filter((key) => (OPTIONS[key].in as readonly EntryPoint[]).includes(entry)),
  ]),
) as unknown as Record<EntryPoint, readonly OptionName[]>

/**
 * The options of `entry`, checked, defaulted and frozen. `opts` is read once, so a getter cannot
 * give the check one value and the use another. `null` is no options; an unknown key is a typo.
 */
export function compileOptions(entry: EntryPoint, opts: unknown, leaseMs = 0, name = 'opts'): Compiled {
  return compileCall(entry, opts, leaseMs, name).options
}

/** {@link compileOptions}, plus the per-call options (an occurrence) checked for this call. */
export function compileCall(entry: EntryPoint, opts: unknown, leaseMs = 0, name = 'opts'): CallOptions {
  if (opts === undefined || opts === null) return { options: build(entry, {}, [], leaseMs, name), ...NO_OCCURRENCE }
  if (typeof opts !== 'object') return fail(name, 'an object', opts)
  const keys = optionsOf(entry)
  const bag: Record<string, unknown> = {}
  let own: string[]
  let array: boolean
  try {
    // Every look at a revoked Proxy throws, Array.isArray included.
    array = Array.isArray(opts)
    own = array ? [] : Object.keys(opts)
    for (const key of keys) bag[key] = (opts as Record<string, unknown>)[key]
  } catch {
    return fail(name, 'an object whose properties can be read', opts)
  }
  if (array) return fail(name, 'an object', opts)
  const options = build(entry, bag, own, leaseMs, name)
  const at = (key: 'occurrence' | 'nextOccurrence') =>
    bag[key] == null ? null : (OPTIONS[key] as OptionRow<number | null>).check(bag[key], `${name}.${key}`, { leaseMs })
  return { options, occurrence: at('occurrence'), nextOccurrence: at('nextOccurrence') }
}

const NO_OCCURRENCE = { occurrence: null, nextOccurrence: null } as const

function build(entry: EntryPoint, bag: Record<string, unknown>, own: string[], leaseMs: number, name: string) {
  const keys = optionsOf(entry)
  for (const key of own) {
    if (!(keys as readonly string[]).includes(key)) {
      fail(`${name}.${key}`, `one of the known options (${keys.join(', ')})`, key)
    }
  }
  const options: Record<string, unknown> = {}
  for (const key of keys) {
    const option = OPTIONS[key] as OptionRow<unknown>
    if (!option.perCall) options[key] = option.check(bag[key], `${name}.${key}`, { leaseMs })
  }
  return Object.freeze(options) as Compiled
}
