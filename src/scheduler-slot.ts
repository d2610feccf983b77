/**
 * Which occurrence a fire is for, from what its scheduler passes: the one place that knows each
 * scheduler's shapes. Every wrapper and every catch-up path reads the occurrence here.
 *
 * The rule for every scheduler: a scheduled fire names its slot however late it runs. A GC pause
 * or a busy event loop that delays a fire is exactly what the occurrence keys are for, so no fire
 * is ever taken for "not a scheduled one" because it came late.
 */
import { types } from 'node:util'
import { formatValue } from './format-value.js'
import { parseInstant } from './time-input.js'
import { checkOptions } from './validate.js'

/** An occurrence and the one after it, in ms since the epoch; null where the scheduler cannot say. */
export interface NamedSlot {
  readonly occurrence: number | null
  readonly nextOccurrence: number | null
}

/** A fire that names no occurrence: the lease alone decides. */
export const NO_SLOT: NamedSlot = Object.freeze({ occurrence: null, nextOccurrence: null })

// Postgres prints a timestamptz with a four-digit year, and `new Date()` reads it back, only here.
const MIN_MS = 0
const MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999)

/** A Date's ms when it is a real instant that can be stored and read back, else null. */
function instantMs(value: unknown): number | null {
  if (!types.isDate(value)) return null
  const ms = value.getTime()
  return Number.isFinite(ms) && ms >= MIN_MS && ms <= MAX_MS ? ms : null
}

function call(target: object, method: unknown, ...args: unknown[]): unknown {
  return typeof method === 'function' ? (method as (...a: unknown[]) => unknown).apply(target, args) : null
}

/**
 * The slot of one fire, from the first argument a scheduler passes to the wrapped tick:
 *
 * - node-cron 4's context: `ctx.date` is the slot node-cron computed, and `ctx.task.getNextRun()`
 *   the next. node-cron itself skips a fire later than its `missedExecutionTolerance`
 *   (`execution:missed`), so every fire it makes is on its slot.
 * - croner's job: the latest scheduled time at or before the run started (`currentRun()`, which
 *   croner rounds down to the second; its slots are whole seconds, so rounding moves no slot).
 *   croner does not tell a scheduled fire from `job.trigger()`, so a run started by hand names the
 *   latest slot too: it runs only if no replica has run that slot yet. To run outside the schedule,
 *   call `withCronLease` with no occurrence.
 * - the `cron` package's job (NestJS's `@Cron`): the latest scheduled time at or before
 *   `lastDate()`, the moment it fired, in the job's zone.
 * - `{ occurrence, nextOccurrence }` by hand: checked as the options are.
 * - anything else (nothing, `setInterval`'s nothing, an unknown shape): no occurrence.
 */
export function schedulerSlot(at: unknown): NamedSlot {
  if (typeof at !== 'object' || at === null || types.isProxy(at)) return NO_SLOT
  const node = at as { date?: unknown; task?: { getNextRun?: unknown } }
  if (types.isDate(node.date)) {
    const task = node.task
    const next = typeof task === 'object' && task !== null ? call(task, task.getNextRun) : null
    return { occurrence: instantMs(node.date), nextOccurrence: instantMs(next) }
  }
  const croner = at as { currentRun?: unknown; nextRun?: unknown; previousRuns?: unknown }
  if (typeof croner.currentRun === 'function' && typeof croner.previousRuns === 'function') {
    const run = instantMs(call(at, croner.currentRun))
    const slot = run === null ? null : (call(at, croner.previousRuns, 1, new Date(run + 1)) as unknown[] | null)?.[0]
    return { occurrence: instantMs(slot), nextOccurrence: instantMs(call(at, croner.nextRun)) }
  }
  if (isCronJob(at)) return cronJobSlot(at)
  if (!('occurrence' in at) && !('nextOccurrence' in at)) return NO_SLOT
  const given = checkOptions(at, ['occurrence', 'nextOccurrence'], 'at')
  return {
    occurrence: given.occurrence == null ? null : parseInstant(given.occurrence, 'at.occurrence'),
    nextOccurrence: given.nextOccurrence == null ? null : parseInstant(given.nextOccurrence, 'at.nextOccurrence'),
  }
}

/** The parts of the `cron` package's `CronJob` (v3 and v4) read here; luxon DateTimes where it returns dates. */
export interface CronPackageJob {
  cronTime: { getNextDateFrom(start: Date | LuxonLike, zone?: unknown): LuxonLike }
  lastDate(): Date | null
  nextDate(): LuxonLike
}

interface LuxonLike {
  toMillis(): number
  plus(duration: { milliseconds: number }): LuxonLike
}

function isCronJob(at: object): at is CronPackageJob {
  const job = at as { cronTime?: { getNextDateFrom?: unknown }; lastDate?: unknown; nextDate?: unknown }
  return (
    typeof job.lastDate === 'function' &&
    typeof job.nextDate === 'function' &&
    typeof job.cronTime?.getNextDateFrom === 'function'
  )
}

/**
 * The slot of the `cron` package job's last fire: the latest scheduled time not after
 * `lastDate()`. The package has no "previous date", so the search starts a second before the fire
 * and doubles back until a slot lies before it (a yearly schedule is found within 2^36 ms, about
 * two years), then walks forward to the last slot not after the fire. Dates are made in the job's
 * zone (from its `nextDate()`), so a time-zoned schedule keeps its DST rules.
 */
export function cronJobSlot(job: CronPackageJob): NamedSlot {
  let fired: number | null
  let inZone: LuxonLike
  try {
    fired = instantMs(job.lastDate())
    inZone = job.nextDate()
  } catch {
    return NO_SLOT
  }
  const nextMs = Number(inZone?.toMillis?.())
  const nextOccurrence = Number.isFinite(nextMs) && nextMs >= MIN_MS && nextMs <= MAX_MS ? nextMs : null
  if (fired === null) return { occurrence: null, nextOccurrence }
  const at = (ms: number) => inZone.plus({ milliseconds: ms - inZone.toMillis() })
  const nextFrom = (ms: number) => job.cronTime.getNextDateFrom(at(ms)).toMillis()
  try {
    let slot = nextFrom(fired - 1000)
    for (let back = 2000; slot > fired; back *= 2) {
      if (back > 2 ** 36) return { occurrence: null, nextOccurrence }
      slot = nextFrom(fired - back)
    }
    for (let next = nextFrom(slot); next <= fired && next > slot; next = nextFrom(slot)) slot = next
    return { occurrence: slot >= MIN_MS && slot <= MAX_MS ? slot : null, nextOccurrence }
  } catch {
    return { occurrence: null, nextOccurrence }
  }
}

// node-cron builds the key as `${name}:${slot.toISOString()}`. Only this trailing slot is removed,
// so a task name that itself contains ':' stays whole.
const KEY_SLOT = /:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)$/

const KEY_RULE = "node-cron's 'name:slot' key, the slot as Date#toISOString() writes a real instant from 1970 to 9999"

/**
 * The task name and slot in a node-cron 4 coordinator key. A slot that is not exactly what
 * `toISOString()` writes for a real instant in 1970–9999 (February 30th, month 13, a signed year)
 * is refused with a TypeError naming the key: node-cron never makes one, so it comes from a call
 * by hand, and reading it as some other instant would claim a slot nobody named. node-cron skips a
 * fire whose coordinator throws (`coordinator-error`), so the refusal is a loud miss, never a run.
 */
export function coordinatorKeySlot(key: unknown): { name: string; occurrence: number } {
  const match = typeof key === 'string' ? KEY_SLOT.exec(key) : null
  const text = match?.[1]
  const ms = text === undefined ? Number.NaN : Date.parse(text)
  if (match === null || !(ms >= MIN_MS && ms <= MAX_MS) || new Date(ms).toISOString() !== text) {
    throw new TypeError(`pg-cron-lease: key must be ${KEY_RULE}, got ${formatValue(key)}`)
  }
  return { name: (key as string).slice(0, match.index), occurrence: ms }
}
