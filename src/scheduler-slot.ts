/**
 * Which occurrence a fire is for, from what its scheduler passes: the one place that knows each
 * scheduler's shapes. A fire names its slot however late it runs: lateness is what the keys are for.
 */
import { types } from 'node:util'
import { MAX_MS, MIN_MS, parseInstant } from './time-input.js'
import { checkOptions, fail } from './validate.js'

/** An occurrence and the one after it, in ms since the epoch; null where the scheduler cannot say. */
export interface NamedSlot {
  readonly occurrence: number | null
  readonly nextOccurrence: number | null
}

/** A fire that names no occurrence: the lease alone decides. */
export const NO_SLOT: NamedSlot = Object.freeze({ occurrence: null, nextOccurrence: null })

// Ms that can be stored and read back, else null.
const storable = (ms: number): number | null => (Number.isFinite(ms) && ms >= MIN_MS && ms <= MAX_MS ? ms : null)
const instantMs = (value: unknown): number | null => (types.isDate(value) ? storable(value.getTime()) : null)

function call(target: object, method: unknown, ...args: unknown[]): unknown {
  return typeof method === 'function' ? (method as (...a: unknown[]) => unknown).apply(target, args) : null
}

/**
 * The slot of one fire, from the scheduler's first argument: node-cron 4's context (`ctx.date`),
 * croner's job (the latest slot at or before `currentRun()`, so a `trigger()` names it too), the
 * `cron` package's job, `{ occurrence, nextOccurrence }` by hand; anything else names none.
 */
function schedulerSlot(at: unknown): NamedSlot {
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
  const read = (key: keyof NamedSlot) => (given[key] == null ? null : parseInstant(given[key], `at.${key}`))
  return { occurrence: read('occurrence'), nextOccurrence: read('nextOccurrence') }
}

/**
 * The slot of a fire from its first argument, else from the `cron` package's job as `this`:
 * `CronJob.from({ onTick: tick })` calls `onTick(onComplete)` with the job as `this`, and the
 * argument (undefined, or the onComplete function) names nothing.
 */
export function fireSlot(self: unknown, at: unknown): NamedSlot {
  const unnamed = at === undefined || typeof at === 'function'
  if (unnamed && typeof self === 'object' && self !== null && !types.isProxy(self) && isCronJob(self)) {
    return cronJobSlot(self)
  }
  return schedulerSlot(at)
}

/** The parts of the `cron` package's `CronJob` (v3, v4) read here; luxon DateTimes for dates. */
export interface CronPackageJob {
  cronTime: { getNextDateFrom(start: Date | LuxonLike, zone?: unknown): LuxonLike }
  lastDate(): Date | null
  nextDate(): LuxonLike
}

export interface LuxonLike {
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
 * The latest slot not after `lastDate()`: with no "previous date" in the package, the search
 * doubles back from a second before the fire (up to 2^36 ms), then walks forward; dates are made
 * in the job's zone, so DST rules hold.
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
  const nextOccurrence = storable(Number(inZone?.toMillis?.()))
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
    return { occurrence: storable(slot), nextOccurrence }
  } catch {
    return { occurrence: null, nextOccurrence }
  }
}

// node-cron's key is `${name}:${slot.toISOString()}`; only the trailing slot is cut, as names may hold ':'.
const KEY_SLOT = /:(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)$/

const KEY_RULE = "node-cron's 'name:slot' key, the slot as Date#toISOString() writes a real instant from 1970 to 9999"

/**
 * The task name and slot in a node-cron 4 coordinator key. A slot that is not exactly what
 * `toISOString()` writes is a TypeError: read as another instant, it would claim a slot nobody named.
 */
export function coordinatorKeySlot(key: unknown): { name: string; occurrence: number } {
  const match = typeof key === 'string' ? KEY_SLOT.exec(key) : null
  const text = match?.[1]
  const ms = text === undefined ? Number.NaN : Date.parse(text)
  if (match === null || storable(ms) === null || new Date(ms).toISOString() !== text) fail('key', KEY_RULE, key)
  return { name: (key as string).slice(0, match.index), occurrence: ms }
}
