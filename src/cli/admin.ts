/**
 * `pg-cron-lease pause`, `resume` and `release`: making the one change on the one job's row
 * (src/admin.ts), and saying what changed by the database clock. Their arguments are read by
 * src/cli/options.ts, with the library's own parsers (src/time-input.ts).
 */
import type pg from 'pg'
import { type JobState, pause, release, resume } from '../admin.js'
import { escapeControls } from '../escape.js'
import { Exit, oneLine, usage } from './exit.js'
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

/** Makes the change and returns the line that says what it did; a job without a row is exit 1. */
export async function runJobAction(client: pg.Client, request: JobRequest): Promise<string> {
  const { action, jobName, table } = request
  let state: JobState | null
  try {
    state =
      action === 'pause'
        ? await pause(client, jobName, { table, forMs: request.forMs, until: request.until })
        : action === 'resume'
          ? await resume(client, jobName, { table })
          : await release(client, jobName, { table })
  } catch (error) {
    throw asUsage(error) ?? error
  }
  const name = escapeControls(jobName)
  if (state === null) {
    throw new Exit(
      `no job "${name}" in ${table} at ${request.where}: it has never been claimed, or the name has a typo; nothing was changed`,
      1,
    )
  }
  return `${describeChange(request, name, state)}\n`
}

/** The library's names for what the command line calls --until, --for, --table and <job>. */
const FLAGS: [RegExp, string][] = [
  [/\bopts\.until\b/g, '--until'],
  [/\bopts\.forMs\b/g, '--for'],
  [/\bopts\.table\b/g, '--table'],
  [/\bjobName\b/g, '<job>'],
]

// A value quoted in a message (a job name, the text given) is data, not the argument's name.
const QUOTED = /("(?:[^"\\]|\\.)*"|'[^']*')/

/**
 * A library TypeError about one of this command's arguments, as a usage error naming the flag. The
 * library refuses a bad argument before it writes (an --until not in the future by the database
 * clock among them), so nothing was changed. Any other error (a driver's, or a TypeError about the
 * driver's result) is not about the user's input and stays a failure.
 */
export function asUsage(error: unknown): Exit | undefined {
  if (!(error instanceof TypeError) || !error.message.startsWith('pg-cron-lease: ')) return undefined
  let named = false
  const message = oneLine(error)
    .slice('pg-cron-lease: '.length)
    .split(QUOTED)
    .map((part, i) => {
      if (i % 2 === 1) return part
      for (const [name, flag] of FLAGS) {
        part = part.replace(name, () => {
          named = true
          return flag
        })
      }
      return part
    })
    .join('')
  if (!named) return undefined
  return usage(/nothing was changed/.test(message) ? message : `${message}; nothing was changed`)
}

/**
 * What a change did, on one line; exported for the tests of its wording. `wasPaused` is read when
 * the library reports it (whether the job was paused at the change, by the database clock); when
 * it does not, whether a resume changed anything is unknown, and the line does not claim either.
 */
export function describeChange(
  request: Pick<JobRequest, 'action' | 'forMs'>,
  name: string,
  state: JobState & { wasPaused?: boolean },
): string {
  const at = `(database clock ${state.changedAt})`
  const leaseUntil = readable(state.leaseUntil)
  const pausedUntil = state.pausedUntil === null ? null : readable(state.pausedUntil)
  const stillPaused = pausedUntil !== null && laterThan(pausedUntil, state.changedAt)
  switch (request.action) {
    case 'pause':
      if (pausedUntil !== 'infinity') {
        return `Paused ${name} until ${pausedUntil} ${at}; no replica can claim it until then.`
      }
      return request.forMs === undefined
        ? `Paused ${name} until resumed ${at}; no replica can claim it until pg-cron-lease resume.`
        : `Paused ${name} until resumed ${at}: --for ends after the year 9999, so the pause is open-ended; no replica can claim it until pg-cron-lease resume.`
    case 'resume':
      if (state.wasPaused === false) return `Nothing to resume: ${name} was not paused ${at}; nothing changed.`
      return laterThan(leaseUntil, state.changedAt)
        ? `Resumed ${name} ${at}; it is not paused, and the next claim after its current lease ends at ${leaseUntil} runs it.`
        : `Resumed ${name} ${at}; it is not paused, and the next claim on any replica runs it.`
    case 'release':
      return stillPaused
        ? `Released the lease of ${name} ${at}; it is still paused ${untilText(pausedUntil)}, so no replica can claim it before then.`
        : `Released the lease of ${name} ${at}; the next claim on any replica runs it.`
  }
}

/**
 * A database timestamp as printed: one after the year 9999 (a year of five or more digits, which
 * `new Date()` cannot read) is shown as 'infinity', the end no claim will ever reach.
 */
function readable(timestamp: string): string {
  return /^\d{5,}-/.test(timestamp) ? 'infinity' : timestamp
}

/** Whether database timestamp `a` ('infinity' allowed) is after `b`. */
function laterThan(a: string, b: string): boolean {
  return a === 'infinity' || msBetween(a, b) > 0
}
