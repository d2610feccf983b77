/** `pg-cron-lease history`: the run history, newest first, with the missed occurrences between runs. */
import { escapeControls } from '../format-value.js'
import { columns, duration, jsonText, type Paint } from '../human.js'
import { listRuns, type RunInfo } from '../listings.js'
import { BIN, type Command, DATABASE_EXIT, usage } from './args.js'

const HISTORY_LIMIT = 20

export const history: Command = {
  summary: 'Show the last runs of every job, or of one: when, where, how long, and how each ended',
  options: ['table', 'url', 'job', 'limit', 'format', 'json'],
  optionHelp: {
    job: 'Only the runs of this job',
    format: 'text (default) or json (the entries listRuns() returns)',
  },
  details:
    'Prints the run history, newest first: per run, when it started (its claim, by the database\n' +
    'clock), the occurrence it ran for ("-" for a claim by the lease alone), its holder, how long\n' +
    'it took and how it ended: running (from its claim on, while its lease holds), ok, error (with\n' +
    'the first line of the error), or unfinished (its lease ran out with no outcome recorded: its\n' +
    'replica died or lost the lease). Runs told not to record (record: false, history: false) and\n' +
    'claims by replicas that record no outcome are not listed.\n' +
    'Occurrences that fell due with no claim show as a line of their own below the run after them.\n' +
    `At most --limit runs (default ${HISTORY_LIMIT}, at most 10000). Needs the history table that\n` +
    `${BIN} migrate adds.\n\n` +
    '--format json prints the array listRuns() returns: jobName, occurrence, holder, claimedAt,\n' +
    'startedAt, finishedAt, durationMs, outcome, error, missed, catchUp.\n\n' +
    'Examples:\n' +
    `  ${BIN} history --job billing:hourly\n` +
    `  ${BIN} history --limit 200 --json | jq -r '.[] | select(.outcome != "ok") | .startedAt'`,
  exitCodes: `0 printed, ${DATABASE_EXIT}, 2 usage error`,
  async run({ format, jobs, table, limit = HISTORY_LIMIT }, context) {
    if (format === 'prometheus') throw usage('history prints text or json, not prometheus')
    if (jobs.length > 1) throw usage(`history shows one job, or every job: give --job once`)
    const [jobName] = jobs
    const runs = await context.connect((client) => listRuns(client, { table, jobName, limit }))
    context.out(format === 'json' ? jsonText(runs) : renderHistory(runs, table, jobName, context.paint))
  },
}

export function renderHistory(runs: RunInfo[], table: string, jobName: string | undefined, paint: Paint): string {
  const whose = jobName === undefined ? '' : ` of ${escapeControls(jobName)}`
  if (runs.length === 0) return `No runs${whose} in the history of ${table} yet.\n`
  const { plain, green, red, yellow } = paint
  const colour = { running: plain, ok: green, error: red, unfinished: red, unknown: yellow }
  const header = [...(jobName === undefined ? ['JOB'] : []), 'STARTED', 'OCCURRENCE', 'HOLDER', 'TOOK', 'OUTCOME']
  const rows = runs.map((run) => [
    ...(jobName === undefined ? [escapeControls(run.jobName)] : []),
    readable(run.startedAt),
    run.occurrence === null ? '-' : readable(run.occurrence),
    run.holder === null ? '-' : escapeControls(run.holder),
    run.durationMs === null ? '-' : duration(run.durationMs),
    `${run.outcome}${run.catchUp ? ' (catch-up)' : ''}${run.error === null ? '' : `: ${escapeControls(run.error)}`}`,
  ])
  const [head, ...lines] = columns([header, ...rows], (text, row, column) =>
    row > 0 && column === header.length - 1 ? colour[runs[row - 1]!.outcome](text) : text,
  )
  // The occurrences missed fell due before a run: below it, newest first.
  const body = runs.flatMap((run, i) => {
    if (run.missed === 0) return [lines[i]!]
    const missed = `${run.missed} occurrence${run.missed === 1 ? '' : 's'} missed`
    return [lines[i]!, paint.yellow(`  … ${missed}${jobName === undefined ? ` (${escapeControls(run.jobName)})` : ''}`)]
  })
  return `Runs${whose} in ${table}, newest first (database clock):\n\n${[paint.bold(head!), ...body].join('\n')}\n`
}

// `2026-12-04 09:00:00.123Z`: the database's UTC text, shorter, to the millisecond.
const readable = (iso: string) => iso.replace('T', ' ').replace(/(\.\d{3})\d*Z$/, '$1Z')
