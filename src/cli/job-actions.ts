/** `pause`, `resume` and `release`: the one change on one job's row, said by the database clock. */
import * as admin from '../admin.js'
import { type ArgumentError, ERROR_CODES } from '../errors.js'
import { escapeControls } from '../format-value.js'
import { duration, msBetween } from '../human.js'
import { DEFAULTS } from '../options.js'
import { untilText } from '../verdict.js'
import { BIN, type Command, type Exit, failed, usage } from './args.js'

const CHANGES = { pause: admin.pause, resume: admin.resume, release: admin.release }

type JobAction = keyof typeof CHANGES

export const pause: Command = jobCommand(
  'pause',
  'Pause one job on every replica, for a while or until resumed',
  'No claim of the job succeeds until the pause ends: with --for after that long, with --until at\n' +
    'that instant, with neither when resumed. Times are by the database clock: --until must be in\n' +
    'its future (and no later than 9999-12-31T23:59:59.999Z), and a --for that ends after the year\n' +
    '9999 pauses until resumed. A tick running at that moment is not stopped, but its renew and\n' +
    'keep-alive beats fail and its ctx.signal aborts. A paused job is never overdue for check, but\n' +
    `still FAILING if its last run failed. Needs the columns ${BIN} migrate adds.\n\n` +
    'Examples:\n' +
    `  ${BIN} pause billing:hourly --for 2h\n` +
    `  ${BIN} pause billing:hourly --until 2026-12-01T06:00:00Z\n` +
    `  ${BIN} pause billing:hourly`,
)

export const resume: Command = jobCommand(
  'resume',
  'End the pause of one job: the next claim on any replica runs it',
  'Ends the pause at once; a pause that already ran out is only cleared. A job that is not\n' +
    'paused, by the database clock, is said to be so; nothing changes, and it exits 0. Needs the\n' +
    `columns ${BIN} migrate adds.\n\n` +
    'Example:\n' +
    `  ${BIN} resume billing:hourly`,
)

export const release: Command = jobCommand(
  'release',
  "End one job's current lease now, for a holder that crashed with a long lease",
  'The next claim, on any replica, runs the job. A tick that is in fact still running is not\n' +
    'stopped, but its renew and keep-alive beats fail and its ctx.signal aborts. A pause stays in\n' +
    'force: the lease then ends when the pause does.\n\n' +
    'Example:\n' +
    `  ${BIN} release import:nightly`,
)

function jobCommand(action: JobAction, summary: string, details: string): Command {
  return {
    summary,
    options: action === 'pause' ? ['for', 'until', 'table', 'url', 'lock-timeout'] : ['table', 'url', 'lock-timeout'],
    job: true,
    details:
      'Changes only the row of <job>, by one statement, and prints what changed by the database clock.\n' +
      `${details}\n\nIt waits for the row lock at most --lock-timeout (default ${duration(DEFAULTS.lockTimeoutMs)}); a transaction holding\n` +
      'it longer (a crashed holder, idle in a fence) ends the command with one line naming its pid and\n' +
      `application_name, and exit 1.\n\nA job name that starts with a dash goes after --: ${BIN} ${action} -- -name`,
    exitCodes: `${action === 'resume' ? '0 resumed, or the job was not paused and nothing changed' : '0 changed'}, 1 the job has no row (never claimed, or a typo), its row stayed locked past --lock-timeout, or the database cannot be reached, 2 usage error`,
    async run({ table, job, forMs, until, lockTimeoutMs }, context) {
      const state = await context.connect(async (client, target) => {
        const opts = action === 'pause' ? { table, forMs, until, lockTimeoutMs } : { table, lockTimeoutMs }
        const state = await CHANGES[action](client, job!, opts).catch((error) => {
          throw asUsage(error) ?? error
        })
        if (state !== null) return state
        throw failed(
          `no job "${escapeControls(job!)}" in ${table} at ${target.label}: it has never been claimed, or the name has a typo; nothing was changed`,
        )
      })
      context.out(`${describeChange({ action, forMs }, job!, state)}\n`)
    },
  }
}

const FLAGS: Record<string, string> = {
  'opts.until': '--until',
  'opts.forMs': '--for',
  'opts.table': '--table',
  'opts.lockTimeoutMs': '--lock-timeout',
  jobName: '<job>',
}

/** The library's argument error about this command's input as a usage error naming the flag. */
export function asUsage(error: unknown): Exit | undefined {
  const { code, argument = '', detail = '' } = (error ?? {}) as Partial<ArgumentError>
  if (code !== ERROR_CODES.INVALID_ARGUMENT || FLAGS[argument] === undefined) return undefined
  return usage(`${FLAGS[argument]} ${detail}${detail.includes('nothing was changed') ? '' : '; nothing was changed'}`)
}

// Without `wasPaused`, a resume claims neither way.
export function describeChange(request: { action: JobAction; forMs?: number }, jobName: string, state: admin.JobState) {
  const name = escapeControls(jobName)
  const at = `(database clock ${state.changedAt})`
  const leaseUntil = readable(state.leaseUntil)
  const pausedUntil = state.pausedUntil === null ? null : readable(state.pausedUntil)
  switch (request.action) {
    case 'pause':
      if (pausedUntil !== 'infinity')
        return `Paused ${name} until ${pausedUntil} ${at}; no replica can claim it until then.`
      return request.forMs === undefined
        ? `Paused ${name} until resumed ${at}; no replica can claim it until ${BIN} resume.`
        : `Paused ${name} until resumed ${at}: --for ends after the year 9999, so the pause is open-ended; no replica can claim it until ${BIN} resume.`
    case 'resume':
      if (state.wasPaused === false) return `Nothing to resume: ${name} was not paused ${at}; nothing changed.`
      return laterThan(leaseUntil, state.changedAt)
        ? `Resumed ${name} ${at}; it is not paused, and the next claim after its current lease ends at ${leaseUntil} runs it.`
        : `Resumed ${name} ${at}; it is not paused, and the next claim on any replica runs it.`
    case 'release':
      return pausedUntil !== null && laterThan(pausedUntil, state.changedAt)
        ? `Released the lease of ${name} ${at}; it is still paused ${untilText(pausedUntil)}, so no replica can claim it before then.`
        : `Released the lease of ${name} ${at}; the next claim on any replica runs it.`
  }
}

// Past year 9999, which `new Date()` cannot read.
const readable = (timestamp: string) => (/^\d{5,}-/.test(timestamp) ? 'infinity' : timestamp)
const laterThan = (a: string, b: string) => a === 'infinity' || msBetween(a, b) > 0
