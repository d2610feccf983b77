/** Which occurrence a fire is for, however late it runs, from what each scheduler passes it. */
import { types } from 'node:util'
import { checkOptions, fail, MAX_MS, MIN_MS, parseInstant } from './validate.js'

/** An occurrence and the one after it, in ms since the epoch; null where the scheduler cannot say. */
export type NamedSlot = { readonly occurrence: number | null; readonly nextOccurrence: number | null }

/** A fire that names no occurrence: the lease alone decides. */
export const NO_SLOT: NamedSlot = Object.freeze({ occurrence: null, nextOccurrence: null })

const storable = (ms: number): number | null => (Number.isFinite(ms) && ms >= MIN_MS && ms <= MAX_MS ? ms : null)
const instantMs = (value: unknown): number | null => (types.isDate(value) ? storable(value.getTime()) : null)
const plain = (value: unknown): value is object => typeof value === 'object' && value !== null && !types.isProxy(value)

function call(target: unknown, method: unknown, ...args: unknown[]): unknown {
  return typeof method === 'function' ? (method as (...a: unknown[]) => unknown).apply(target, args) : null
}

// From node-cron 4's context, croner's job (its latest slot by `currentRun()`, so a `trigger()` names one too),
// the `cron` package's job, or `{ occurrence, nextOccurrence }` by hand.
function schedulerSlot(at: unknown): NamedSlot {
  if (!plain(at)) return NO_SLOT
  const node = at as { date?: unknown; task?: { getNextRun?: unknown } }
  if (types.isDate(node.date))
    return { occurrence: instantMs(node.date), nextOccurrence: instantMs(call(node.task, node.task?.getNextRun)) }
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

/** The slot of a fire from its first argument, else from `this`: `CronJob.from` calls `onTick(onComplete)`. */
export function fireSlot(self: unknown, at: unknown): NamedSlot {
  const unnamed = at === undefined || typeof at === 'function'
  return unnamed && plain(self) && isCronJob(self) ? cronJobSlot(self) : schedulerSlot(at)
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

// The latest slot not after `lastDate()`; with no "previous date", it doubles back, then walks forward (zoned, for DST).
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

// A slot not exactly as `toISOString()` writes it is refused: read as another instant, it claims a slot nobody named.
export function coordinatorKeySlot(key: unknown): { name: string; occurrence: number } {
  const match = typeof key === 'string' ? KEY_SLOT.exec(key) : null
  const text = match?.[1]
  const ms = text === undefined ? Number.NaN : Date.parse(text)
  if (match === null || storable(ms) === null || new Date(ms).toISOString() !== text) fail('key', KEY_RULE, key)
  return { name: (key as string).slice(0, match.index), occurrence: ms }
}
