/** `status` and `check`: every job, shown (a table, listLeases()' JSON, Prometheus) or judged (src/verdict.ts). */
import { escapeControls } from '../format-value.js'
import { ago, columns, duration, jsonText, msBetween, type Paint, span } from '../human.js'
import { type LeaseInfo, type ListLeasesOptions, listLeases } from '../listings.js'
import { renderPrometheus } from '../prometheus.js'
import { type CheckResult, checkJobs, untilText } from '../verdict.js'
import { BIN, type Command, DATABASE_EXIT, EXIT, type ExitCode, type Format, type Values } from './args.js'

export const status: Command = {
  summary: 'Show every job: its lease, its last run, and whether it is failing, overdue or paused',
  options: ['table', 'url', 'format', 'json', 'grace', 'overdue-factor'],
  details:
    'Per job: the holder, when it was claimed, when its lease expires, its last run (LAST RUN:\n' +
    '"running for 12 s", "ok 3 min ago", "error …", or "unfinished …" when its lease ran out with no\n' +
    'outcome: its replica died or lost the lease) and how long it took (TOOK), when it is next due\n' +
    '(NEXT DUE: "in 5 min", or "due 3 min ago" once passed with no claim since; "-" while its\n' +
    'scheduler has not said), how many of its occurrences fell due unclaimed so far (MISSED), and\n' +
    'STATE: FAILING (its last run that ended failed) or DIED (it ended unfinished), until a run ends\n' +
    'ok,\n' +
    'OVERDUE (later than its due time, the stored one or its last claim plus its interval, by more\n' +
    'than the grace: --grace, else (--overdue-factor − 1) × the interval, at most a minute each;\n' +
    'never while paused) or PAUSED. A pause is planned: the occurrences it skips are neither overdue\n' +
    'nor missed, and once it ends the job is next due at its first occurrence after the end; under\n' +
    'Pauses: each such job is listed, "paused until …" or "resumed at …". Ages\n' +
    "are differences of two database timestamps read in one statement; this machine's clock plays\n" +
    'no part. A run that died is named under Last errors, with its holder and when its lease ran\n' +
    'out. Job names, holders and errors are printed with control characters, invisible ones\n' +
    '(zero-width, bidi) and backslashes escaped (\\n, \\x1b, \\u200b, \\\\).\n\n' +
    '--format json prints the array listLeases() returns, ordered by job name: jobName, holder,\n' +
    'claimedAt, leaseUntil, held, remainingMs, checkedAt, lastOutcome, lastEndedOutcome,\n' +
    'lastStartedAt, lastFinishedAt, lastDurationMs, lastError, lastSuccessAt, everyMs, overdue,\n' +
    'paused, pausedUntil, resumedAt, lastOccurrence, nextDueAt, missed, unfinishedRuns. Timestamps\n' +
    'are ISO-8601 UTC text with microseconds; under an\n' +
    'open-ended pause leaseUntil and pausedUntil are "infinity" and remainingMs is null (JSON has no\n' +
    'Infinity).\n\n' +
    "--format prometheus prints the Prometheus text format 0.0.4, ending with # EOF; node_exporter's\n" +
    'textfile collector reads it. Per job_name label, gauges: pg_cron_lease_held,\n' +
    '_last_claim_age_seconds, _last_success_age_seconds, _last_duration_seconds, _last_outcome_ok,\n' +
    '_last_outcome (one sample per outcome label: running, ok, error, unfinished), _interval_seconds,\n' +
    '_overdue, _paused, _next_due_in_seconds (negative once late); and the counters\n' +
    'pg_cron_lease_missed_occurrences_total and _unfinished_runs_total (runs that died). A value not\n' +
    'known yet is left out.\n\n' +
    'Examples:\n' +
    `  ${BIN} status --url postgres://app@db.internal:5432/app\n` +
    `  ${BIN} status --json | jq -r '.[] | select(.lastOutcome == "error") | .jobName'\n` +
    `  ${BIN} status --format prometheus > /var/lib/node_exporter/textfile/pg_cron_lease.prom.$$ &&\n` +
    '    mv /var/lib/node_exporter/textfile/pg_cron_lease.prom.$$ /var/lib/node_exporter/textfile/pg_cron_lease.prom',
  exitCodes: `0 printed, ${DATABASE_EXIT}, 2 usage error`,
  async run(values, context) {
    const leases = await context.connect((client) => listLeases(client, leaseQuery(values)))
    context.out(renderLeases(values.format, leases, values.table, context.paint))
  },
}

export const check: Command = {
  summary: 'Exit 3 when a job is overdue or its last run failed or died, for monitors and probes',
  options: ['table', 'url', 'job', 'json', 'grace', 'overdue-factor'],
  optionHelp: { json: 'Print the verdict as JSON (the exit code is the same)' },
  details:
    'Checks every job in the table, or only those named with --job. A job is unhealthy when:\n' +
    '  OVERDUE        it is later than its due time by more than the grace. Its due time is the\n' +
    '                 next due time its last claim stored ("OVERDUE: due <time>, not claimed for\n' +
    '                 …"), or, with none stored, its last claim plus its interval ("OVERDUE: last\n' +
    '                 claimed … ago, every …"). The grace is --grace, else (--overdue-factor − 1)\n' +
    '                 × the interval, at most a minute each (factor 2: one interval, at most 1m);\n' +
    '  FAILING        its last run that ended failed (until a run ends ok);\n' +
    '  DIED           its last run that ended recorded no outcome before its lease ran out: its\n' +
    '                 replica died or lost the lease (until a run ends ok);\n' +
    '  NEVER CLAIMED  it was named with --job but has no row: never claimed, or a typo.\n' +
    'A run told not to record (record: false) or claimed by a replica that records no outcome\n' +
    'counts for nothing here. A paused job is never overdue, but one FAILING or DIED stays so:\n' +
    'pausing does not fix it. With no job unhealthy it prints one OK line and exits 0; otherwise\n' +
    'one line per unhealthy job, saying which and why, and exits 3. Ages come from the database\n' +
    'clock. --json prints { healthy, checkedAt, table, overdueFactor, jobs: [{ jobName, healthy,\n' +
    'neverClaimed, overdue, failing, died, paused, reason }] } with the same exit codes.\n\n' +
    'Examples:\n' +
    `  ${BIN} check --job billing:hourly --job report:daily\n` +
    `  ${BIN} check --grace 5m --job report:daily\n` +
    `  ${BIN} check --json --overdue-factor 3 | jq '.jobs[] | select(.healthy | not)'`,
  exitCodes: `0 every job is healthy, ${DATABASE_EXIT}, 2 usage error, 3 a job is overdue, failing, died or never claimed`,
  async run(values, context) {
    const result = await context.connect((client) => checkJobs(client, { ...leaseQuery(values), jobs: values.jobs }))
    context.out(values.format === 'json' ? jsonText(result) : renderCheck(result))
    return checkExitCode(result)
  },
}

function leaseQuery({ table, overdueFactor, graceMs }: Values): ListLeasesOptions {
  return { table, overdueFactor, overdueGraceMs: graceMs }
}

export function renderLeases(format: Format, leases: LeaseInfo[], table: string, paint: Paint): string {
  if (format === 'json') return jsonText(leases)
  return format === 'prometheus' ? renderPrometheus(leases) : renderStatus(leases, table, paint)
}

type Cell = [text: string, colour?: keyof Paint]

// In this order in STATE, and counted in the summary line, in lower case.
const STATES: [string, (l: LeaseInfo) => boolean][] = [
  ['FAILING', (l) => l.lastEndedOutcome === 'error'],
  ['DIED', (l) => l.lastEndedOutcome === 'unfinished'],
  ['OVERDUE', (l) => l.overdue],
  ['PAUSED', (l) => l.paused],
]

const HEADER = ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES', 'LAST RUN', 'TOOK', 'NEXT DUE', 'MISSED', 'STATE']

export function renderStatus(leases: LeaseInfo[], table: string, paint: Paint): string {
  if (leases.length === 0) return `No leases in ${table} yet: a job appears after its first claim.\n`
  const checked = leases[0]!.checkedAt
  const rows = leases.map((l): Cell[] => [
    [escapeControls(l.jobName)],
    [l.holder === null ? '-' : escapeControls(l.holder)],
    // Every age is checkedAt minus another database timestamp, never this machine's clock.
    [ago(msBetween(checked, l.claimedAt))],
    expires(l),
    lastRun(l),
    [l.lastDurationMs === null ? '-' : duration(l.lastDurationMs)],
    nextDue(l),
    [String(l.missed), l.missed > 0 ? 'yellow' : 'plain'],
    [STATES.flatMap(([state, is]) => (is(l) ? [state] : [])).join(' ')],
  ])
  const lines = columns([HEADER, ...rows.map((r) => r.map(([text]) => text))], (text, row, column) => {
    if (row === 0) return paint.bold(text)
    if (column === HEADER.length - 1)
      return text.replace(/[A-Z]+/g, (m) => (m === 'PAUSED' ? paint.yellow(m) : paint.red(m)))
    return paint[rows[row - 1]![column]![1] ?? 'plain'](text)
  })
  const count = (n: number, what: string) => (n > 0 ? `, ${n} ${what}` : '')
  const failures = leases
    .filter((l) => l.lastEndedOutcome === 'error' || l.lastEndedOutcome === 'unfinished')
    .map((l) => `${escapeControls(l.jobName)}: ${escapeControls(l.lastError ?? 'no error text recorded')}`)
  // Why a job whose due time passed in a pause is not overdue.
  const pauses = leases
    .filter((l) => l.paused || l.resumedAt !== null)
    .map((l) => `${escapeControls(l.jobName)}: ${pauseNote(l)}`)
  const jobs = `${leases.length} job${leases.length === 1 ? '' : 's'}, ${leases.filter((l) => l.held).length} held`
  const states = STATES.map(([state, is]) => count(leases.filter(is).length, state.toLowerCase())).join('')
  return [
    `${table}: ${jobs}${states} (database clock ${checked})`,
    '',
    ...lines,
    ...(pauses.length > 0 ? ['', 'Pauses:', ...pauses.map((p) => `  ${p}`)] : []),
    ...(failures.length > 0 ? ['', 'Last errors:', ...failures.map((f) => `  ${f}`)] : []),
    '',
  ].join('\n')
}

function pauseNote(l: LeaseInfo): string {
  if (l.paused) return `paused ${untilText(l.pausedUntil)}: not overdue while paused`
  const next = l.nextDueAt === null ? '' : `; next due ${l.nextDueAt}`
  return `resumed at ${l.resumedAt}: the occurrences the pause skipped are neither overdue nor missed${next}`
}

function expires(l: LeaseInfo): Cell {
  if (l.leaseUntil === 'infinity') return ['when resumed', 'yellow']
  if (l.held) return [`in ${span(l.remainingMs)}`, 'green']
  return [`expired ${ago(msBetween(l.checkedAt, l.leaseUntil))}`, 'dim']
}

function lastRun(l: LeaseInfo): Cell {
  if (l.lastOutcome === 'running' && l.lastStartedAt !== null)
    return [`running for ${span(msBetween(l.checkedAt, l.lastStartedAt))}`]
  if (l.lastFinishedAt === null) return ['-']
  const failed = l.lastOutcome === 'error' || l.lastOutcome === 'unfinished'
  // null: the scheduler could not say how it ended (a node-cron coordinator run).
  return [`${l.lastOutcome ?? 'ran'} ${ago(msBetween(l.checkedAt, l.lastFinishedAt))}`, failed ? 'red' : 'plain']
}

function nextDue(l: LeaseInfo): Cell {
  if (l.nextDueAt === null) return ['-']
  const ahead = msBetween(l.nextDueAt, l.checkedAt)
  if (ahead > 0) return [`in ${span(ahead)}`]
  // Passed: red once listLeases calls it overdue (past the grace), plain while a pause explains it.
  return [`due ${ago(-ahead)}`, l.overdue ? 'red' : l.paused ? 'plain' : 'yellow']
}

export function renderCheck({ healthy, jobs, table, checkedAt }: CheckResult): string {
  const unhealthy = jobs.filter((j) => !j.healthy)
  if (!healthy)
    return unhealthy.map((j) => `${escapeControls(j.jobName)}: ${escapeControls(j.reason ?? '')}\n`).join('')
  const n = jobs.length
  const what =
    n === 0 ? `no jobs in ${table} yet, nothing to check` : `${n} job${n === 1 ? '' : 's'} healthy in ${table}`
  return `OK: ${what} (database clock ${checkedAt})\n`
}

export const checkExitCode = (result: CheckResult): ExitCode => (result.healthy ? EXIT.OK : EXIT.UNHEALTHY)
