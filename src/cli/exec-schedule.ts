/** exec's schedule: its slots (croner for --cron, epoch multiples for --every), the slot nearest a clock reading, its defaults. */
import type { Cron } from 'croner'
import { oneLine } from '../format-value.js'
import { duration } from '../human.js'
import { leaseForInterval, MAX_LEASE_MS } from '../presets.js'
import { EXIT, Exit, usage, type Values } from './args.js'

/**
 * A schedule's slots in ms since the epoch: the latest at or before `ms`, the first after it (null:
 * none); and the shortest gap between two.
 *
 * @example
 * everySchedule(60_000).after(90_000) // 120_000
 */
export type Schedule = { atOrBefore(ms: number): number | null; after(ms: number): number | null; gapMs: number }

/**
 * `--every`: whole multiples of the interval since 1970-01-01T00:00Z, so every host counts the same slots.
 *
 * @example
 * everySchedule(3_600_000).atOrBefore(Date.parse('2026-12-01T10:59:00Z')) // 2026-12-01T10:00Z
 */
export function everySchedule(everyMs: number): Schedule {
  return {
    atOrBefore: (ms) => Math.floor(ms / everyMs) * everyMs,
    after: (ms) => (Math.floor(ms / everyMs) + 1) * everyMs,
    gapMs: everyMs,
  }
}

// Enough upcoming slots to meet the short day of a DST change in a daily schedule (a year of them).
const GAP_SAMPLE = 400

/**
 * `--cron`: croner names the slots, DST rules included; the gap is the shortest among the next slots from `fromMs`.
 *
 * @example
 * cronSchedule(new Cron('0 * * * *', { timezone: 'Europe/Berlin' }), Date.now()).gapMs // 3_600_000
 */
export function cronSchedule(job: Cron, fromMs: number): Schedule {
  const slots = job.nextRuns(GAP_SAMPLE, new Date(fromMs)).map((date) => date.getTime())
  const gaps = slots.slice(1).map((slot, i) => slot - slots[i]!)
  return {
    // previousRuns is strictly before its reference, nextRun strictly after.
    atOrBefore: (at) => job.previousRuns(1, new Date(at + 1))[0]?.getTime() ?? null,
    after: (at) => job.nextRun(new Date(at))?.getTime() ?? null,
    gapMs: gaps.length > 0 ? Math.min(...gaps) : Number.POSITIVE_INFINITY,
  }
}

/**
 * The slot nearest `nowMs` (the earlier on a tie), and the one after it; null with no slot at all.
 *
 * @example
 * nearestSlot(everySchedule(10_000), 19_000) // { slot: 20_000, next: 30_000 }
 */
export function nearestSlot(schedule: Schedule, nowMs: number): { slot: number; next: number | null } | null {
  const before = schedule.atOrBefore(nowMs)
  const after = schedule.after(nowMs)
  const slot = before === null || (after !== null && after - nowMs < nowMs - before) ? after : before
  return slot === null ? null : { slot, next: schedule.after(slot) }
}

/** The `--kill-after` default: a third of Kubernetes' default grace, as drainLeases' timeout. */
export const KILL_AFTER_MS = 10_000
const MAX_WITHIN_MS = 5 * 60_000

/**
 * exec's job and schedule, its lease and --within; every refusal a usage error (exit 2) naming the
 * argument, a missing croner an exit 1. `nowMs` picks the slots the shortest gap is measured on.
 *
 * @example
 * const plan = await readPlan(values, Date.now())
 */
export async function readPlan(values: Values, nowMs: number) {
  const { jobs, cron, tz, everyMs } = values
  if (jobs.length !== 1) throw usage(jobs.length === 0 ? 'exec needs --job <name>' : 'exec runs one --job, got more')
  if (cron !== undefined && everyMs !== undefined) throw usage('--cron and --every cannot both be given: one schedule')
  if (cron === undefined && everyMs === undefined) throw usage('exec needs --cron <expr> or --every <duration>')
  if (tz !== undefined && cron === undefined) throw usage('--tz goes with --cron; --every counts from 1970-01-01Z')
  const schedule = cron === undefined ? everySchedule(everyMs!) : cronSchedule(await loadCron(cron, tz), nowMs)
  const gapMs = schedule.gapMs
  const withinMs = values.withinMs ?? Math.min(Math.floor(gapMs / 2), MAX_WITHIN_MS)
  if (withinMs > gapMs)
    throw usage(`--within must be at most ${duration(gapMs)}, the gap between slots, got ${duration(withinMs)}`)
  // Slots further apart than the longest lease (a monthly job) get 80% of that.
  const leaseMs = values.leaseMs ?? leaseForInterval(Math.min(gapMs, MAX_LEASE_MS))
  if (leaseMs > MAX_LEASE_MS) throw usage(`--lease must be at most ${duration(MAX_LEASE_MS)}, got ${duration(leaseMs)}`)
  return { job: jobs[0]!, schedule, leaseMs, withinMs }
}

// croner is an optional peer dependency, loaded here only: `pg-cron-lease` itself never loads it.
async function loadCron(expression: string, tz: string | undefined): Promise<Cron> {
  const { Cron } = await import('croner').catch((error: { code?: string }) => {
    if (error?.code !== 'ERR_MODULE_NOT_FOUND' && error?.code !== 'MODULE_NOT_FOUND') throw error
    throw new Exit('--cron needs the croner package, which is not installed: run npm install croner', EXIT.FAILED)
  })
  let job: Cron
  try {
    // Checked first: croner finds a bad zone only when it computes a date, and says it at length.
    new Intl.DateTimeFormat('en-US', { timeZone: tz ?? 'UTC' })
  } catch {
    throw usage(`--tz must be an IANA time zone such as Europe/Berlin or UTC, got ${JSON.stringify(tz)}`)
  }
  try {
    // UTC unless told: hosts in different zones must name the same slots.
    job = new Cron(expression, { timezone: tz ?? 'UTC' })
  } catch (error) {
    throw usage(
      `--cron must be a cron expression such as "0 * * * *", got ${JSON.stringify(expression)}: ${oneLine(error)}`,
    )
  }
  if (job.nextRun() === null) throw usage(`--cron ${JSON.stringify(expression)} never fires again`)
  return job
}
