/**
 * `pg-cron-lease pause`, `resume` and `release`: reading their arguments, making the one change on
 * the one job's row (src/admin.ts), and saying what changed by the database clock.
 */
import type pg from 'pg'
import { type JobState, pause, release, resume } from '../admin.js'
import { escapeControls } from '../escape.js'
import { clockSql } from '../sql.js'
import { Exit, usage } from './exit.js'
import { untilText } from './health.js'
import { msBetween } from './human.js'

export type JobAction = 'pause' | 'resume' | 'release'

export interface JobRequest {
  action: JobAction
  jobName: string
  table: string
  /** host:port/database, for the message when the job has no row. */
  where: string
  /** pause --for, in ms. */
  forMs?: number
  /** pause --until, as ISO-8601 UTC text. */
  until?: string
}

const UNIT_MS = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 } as const

/**
 * A duration such as `90s`, `15m`, `2h`, `1d` or `1h30m`, in ms: whole numbers, units from the
 * largest down, each at most once. Anything else is a usage error that names the value.
 */
export function parseDuration(text: string, option: string): number {
  const match = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(text)
  const bad = (why: string) =>
    usage(`${option} must be ${why}, such as 90s, 15m, 2h, 1d or 1h30m, got ${JSON.stringify(text)}`)
  if (match === null || text === '') throw bad('a duration in whole d, h, m and s')
  const [, d, h, m, s] = match
  const ms =
    Number(d ?? 0) * UNIT_MS.d + Number(h ?? 0) * UNIT_MS.h + Number(m ?? 0) * UNIT_MS.m + Number(s ?? 0) * UNIT_MS.s
  if (ms === 0) throw bad('longer than zero')
  if (!Number.isSafeInteger(ms)) throw bad('shorter than that')
  return ms
}

const ISO_WITH_ZONE = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)$/i

/**
 * An ISO-8601 date-time with a zone (`Z` or `+02:00`), as ISO-8601 UTC text. A time without a zone
 * is refused: it would mean a different instant on every machine. So is a date that does not
 * exist (February 30th), which the JavaScript parser would roll over into the next month.
 */
export function parseUntil(text: string, option: string): string {
  const match = ISO_WITH_ZONE.exec(text)
  const [year, month, day, hour, minute, second] = (match?.slice(1) ?? []).map((part) => Number(part ?? 0))
  const calendar = new Date(Date.UTC(year!, month! - 1, day!))
  const ms = Date.parse(text)
  if (
    match === null ||
    !Number.isFinite(ms) ||
    calendar.getUTCDate() !== day ||
    calendar.getUTCMonth() !== month! - 1 ||
    hour! > 23 ||
    minute! > 59 ||
    second! > 59
  ) {
    throw usage(
      `${option} must be an ISO-8601 date-time with a zone, such as 2026-12-01T06:00:00Z or 2026-12-01T08:00:00+02:00, got ${JSON.stringify(text)}`,
    )
  }
  return new Date(ms).toISOString()
}

/** Makes the change and returns the line that says what it did; a job without a row is exit 1. */
export async function runJobAction(client: pg.Client, request: JobRequest): Promise<string> {
  const { action, jobName, table } = request
  if (action === 'pause' && request.until !== undefined) await refusePast(client, request.until)
  const state =
    action === 'pause'
      ? await pause(client, jobName, { table, forMs: request.forMs, until: request.until })
      : action === 'resume'
        ? await resume(client, jobName, { table })
        : await release(client, jobName, { table })
  const name = escapeControls(jobName)
  if (state === null) {
    throw new Exit(
      `no job "${name}" in ${table} at ${request.where}: it has never been claimed, or the name has a typo; nothing was changed`,
      1,
    )
  }
  return `${describeChange(action, name, state)}\n`
}

// A pause that ends before it starts would change the row and hold nothing; refused by the
// database clock, the one every replica's claim is judged by.
async function refusePast(client: pg.Client, until: string): Promise<void> {
  const { rows } = await client.query(clockSql())
  const now: string = rows[0].checked_at
  if (Date.parse(until) <= Date.parse(now)) {
    throw usage(`--until ${until} is not in the future by the database clock (${now}); nothing was changed`)
  }
}

function describeChange(action: JobAction, name: string, state: JobState): string {
  const at = `(database clock ${state.changedAt})`
  const stillPaused = state.pausedUntil !== null && laterThan(state.pausedUntil, state.changedAt)
  switch (action) {
    case 'pause':
      return state.pausedUntil === 'infinity'
        ? `Paused ${name} until resumed ${at}; no replica can claim it until pg-cron-lease resume.`
        : `Paused ${name} until ${state.pausedUntil} ${at}; no replica can claim it until then.`
    case 'resume':
      return laterThan(state.leaseUntil, state.changedAt)
        ? `Resumed ${name} ${at}; it is not paused, and the next claim after its current lease ends at ${state.leaseUntil} runs it.`
        : `Resumed ${name} ${at}; it is not paused, and the next claim on any replica runs it.`
    case 'release':
      return stillPaused
        ? `Released the lease of ${name} ${at}; it is still paused ${untilText(state.pausedUntil)}, so no replica can claim it before then.`
        : `Released the lease of ${name} ${at}; the next claim on any replica runs it.`
  }
}

/** Whether database timestamp `a` ('infinity' allowed) is after `b`. */
function laterThan(a: string, b: string): boolean {
  return a === 'infinity' || msBetween(a, b) > 0
}
