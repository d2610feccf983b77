/** `pg-cron-lease check`: a job is unhealthy when overdue (as listLeases says), failing, or named with no row. */
import { escapeControls } from '../escape.js'
import { type LeaseInfo, type ListLeasesOptions, listLeases, overdueGrace } from '../list-leases.js'
import { tableFactsParams, tableFactsSql } from '../sql.js'
import { BIN, type Command, DATABASE_EXIT, type Values } from './args.js'
import { EXIT, type ExitCode } from './exit.js'
import { ago, duration, jsonText, msBetween, span } from './human.js'

export const check: Command = {
  summary: 'Exit 3 when a job is overdue or its last run failed, for monitors and probes',
  options: ['table', 'url', 'job', 'json', 'grace', 'overdue-factor'],
  optionHelp: { json: 'Print the verdict as JSON (the exit code is the same)' },
  details:
    'Checks every job in the table, or only those named with --job. A job is unhealthy when:\n' +
    '  OVERDUE        it is later than its due time by more than the grace. Its due time is the\n' +
    '                 next due time its last claim stored ("OVERDUE: due <time>, not claimed for\n' +
    '                 …"), or, with none stored, its last claim plus its interval ("OVERDUE: last\n' +
    '                 claimed … ago, every …"). The grace is --grace, else (--overdue-factor − 1)\n' +
    '                 × the interval, at most a minute each (factor 2: one interval, at most 1m);\n' +
    '  FAILING        its last recorded run failed (until a run ends ok);\n' +
    '  NEVER CLAIMED  it was named with --job but has no row: never claimed, or a typo.\n' +
    'A paused job is never overdue, but a paused job whose last run failed is still FAILING:\n' +
    'pausing does not fix it. With no job unhealthy it prints one OK line and exits 0; otherwise\n' +
    'one line per unhealthy job, saying which and why, and exits 3. Ages come from the database\n' +
    'clock. --json prints { healthy, checkedAt, table, overdueFactor, jobs: [{ jobName, healthy,\n' +
    'neverClaimed, overdue, failing, paused, reason }] } with the same exit codes.\n\n' +
    'Examples:\n' +
    `  ${BIN} check --job billing:hourly --job report:daily\n` +
    `  ${BIN} check --grace 5m --job report:daily\n` +
    `  ${BIN} check --json --overdue-factor 3 | jq '.jobs[] | select(.healthy | not)'`,
  exitCodes: `0 every job is healthy, ${DATABASE_EXIT}, 2 usage error, 3 a job is overdue, failing or never claimed`,
  async run(values, context) {
    const result = await context.connect(async (client) => {
      const leases = await listLeases(client, leaseQuery(values))
      // An empty table carries no clock reading of its own; the table's facts carry one.
      const checkedAt: string =
        leases[0]?.checkedAt ?? (await client.query(tableFactsSql(), tableFactsParams(values.table))).rows[0].checked_at
      return checkJobs({ ...values, leases, checkedAt })
    })
    context.out(values.format === 'json' ? renderCheckJson(result) : renderCheck(result))
    return checkExitCode(result)
  },
}

/** What `check --json` prints. */
export interface CheckResult {
  healthy: boolean
  /** The database clock reading every job was judged at. */
  checkedAt: string
  table: string
  overdueFactor: number
  /** The checked jobs: the --job names in the order given, else every row in job-name order. */
  jobs: JobHealth[]
}

/** What a verdict is drawn from: the leases read, and the --job names (none: every job in the table). */
export interface CheckInput extends Pick<CheckResult, 'checkedAt' | 'table' | 'overdueFactor'> {
  leases: LeaseInfo[]
  jobs: string[]
  /** The --grace in ms, when one was given; it only words the reason (listLeases judged with it). */
  graceMs?: number
}

export function checkJobs(input: CheckInput): CheckResult {
  const { leases, jobs, table, overdueFactor, checkedAt } = input
  const byName = new Map(leases.map((l) => [l.jobName, l]))
  const names = jobs.length > 0 ? [...new Set(jobs)] : leases.map((l) => l.jobName)
  const verdicts = names.map((name) => judge(name, byName.get(name), input))
  return { healthy: verdicts.every((v) => v.healthy), checkedAt, table, overdueFactor, jobs: verdicts }
}

/** One line per unhealthy job (`name: WHY`), else one line saying all are healthy; controls escaped. */
export function renderCheck({ healthy, jobs, table, checkedAt }: CheckResult): string {
  if (!healthy) {
    return jobs
      .filter((j) => !j.healthy)
      .map((j) => `${escapeControls(j.jobName)}: ${escapeControls(j.reason ?? '')}\n`)
      .join('')
  }
  const n = jobs.length
  const what =
    n === 0 ? `no jobs in ${table} yet, nothing to check` : `${n} job${n === 1 ? '' : 's'} healthy in ${table}`
  return `OK: ${what} (database clock ${checkedAt})\n`
}

export const renderCheckJson: (result: CheckResult) => string = jsonText

export function checkExitCode(result: CheckResult): ExitCode {
  return result.healthy ? EXIT.OK : EXIT.UNHEALTHY
}

/** One job's verdict, as `check --json` prints it. */
export interface JobHealth {
  jobName: string
  healthy: boolean
  /** No row in the table: never claimed, or a typo in the name. */
  neverClaimed: boolean
  overdue: boolean
  failing: boolean
  paused: boolean
  /** Why it is unhealthy, as the text output prints it after the job name; `null` when healthy. */
  reason: string | null
}

export function leaseQuery({ table, overdueFactor, graceMs }: Values): ListLeasesOptions {
  return { table, overdueFactor, overdueGraceMs: graceMs }
}

function judge(jobName: string, lease: LeaseInfo | undefined, input: CheckInput): JobHealth {
  const reasons: string[] = []
  if (lease === undefined) reasons.push(`NEVER CLAIMED: no row in ${input.table}: never claimed, or a typo in the name`)
  const grace = lease && `grace ${duration(overdueGrace(lease.everyMs, input.graceMs, input.overdueFactor))}`
  if (lease?.overdue && lease.nextDueAt !== null) {
    const late = msBetween(lease.checkedAt, lease.nextDueAt)
    reasons.push(`OVERDUE: due ${lease.nextDueAt}, not claimed for ${span(late)} (${grace})`)
  } else if (lease?.overdue) {
    // With no stored due time, overdue implies a known interval: the due time is the last claim plus it.
    const every = lease.everyMs === null ? '' : `, every ${duration(lease.everyMs)}`
    reasons.push(`OVERDUE: last claimed ${ago(msBetween(lease.checkedAt, lease.claimedAt))}${every} (${grace})`)
  }
  const failing = lease?.lastOutcome === 'error'
  if (failing) {
    const when = lease.lastFinishedAt === null ? '' : ` ${ago(msBetween(lease.checkedAt, lease.lastFinishedAt))}`
    reasons.push(`FAILING: last run failed${when}: ${lease.lastError ?? 'no error text recorded'}`)
    // Said so that nobody waits for a retry that cannot come.
    if (lease.paused) reasons.push(`PAUSED ${untilText(lease.pausedUntil)}, so it cannot run again until then`)
  }
  const healthy = reasons.length === 0
  return {
    jobName,
    healthy,
    neverClaimed: lease === undefined,
    overdue: lease?.overdue ?? false,
    failing,
    paused: lease?.paused ?? false,
    reason: healthy ? null : reasons.join('; '),
  }
}

/** "until 2026-12-01T06:00:00.000000Z", or "until resumed" for an open-ended pause. */
export function untilText(pausedUntil: string | null): string {
  return pausedUntil === null || pausedUntil === 'infinity' ? 'until resumed' : `until ${pausedUntil}`
}
