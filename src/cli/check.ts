/** `pg-cron-lease check`: the verdict over the jobs, as text or JSON, and its exit code (3: unhealthy). */
import type pg from 'pg'
import { escapeControls } from '../escape.js'
import { type LeaseInfo, listLeases } from '../list-leases.js'
import { tableFactsParams, tableFactsSql } from '../sql.js'
import { BIN } from './args.js'
import { type Command, DATABASE_EXIT } from './command.js'
import { connectionTarget } from './connect.js'
import { EXIT, type ExitCode } from './exit.js'
import { type JobHealth, judge, leaseQuery, neverClaimed } from './health.js'

/** The `check` command. */
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
    const { table, overdueFactor, graceMs, jobs } = values
    const target = connectionTarget(values.url, context.env)
    const result = await context.connect(target, { command: 'check', table }, async (client) => {
      const leases = await listLeases(client, leaseQuery(values))
      const checkedAt = leases[0]?.checkedAt ?? (await databaseClock(client, table))
      return checkJobs({ leases, jobs, table, overdueFactor, graceMs, checkedAt })
    })
    context.out(values.format === 'json' ? renderCheckJson(result) : renderCheck(result))
    return checkExitCode(result)
  },
}

/** The database clock now, as the library prints timestamps; what an empty table is checked at. */
async function databaseClock(client: pg.Client, table: string): Promise<string> {
  // An empty table carries no clock reading of its own; the table's facts carry one.
  return (await client.query(tableFactsSql(), tableFactsParams(table))).rows[0].checked_at
}

/** What `check --json` prints. */
export interface CheckResult {
  /** Every checked job is healthy (exit 0); otherwise the exit code is 3. */
  healthy: boolean
  /** The database clock reading every job was judged at. */
  checkedAt: string
  table: string
  overdueFactor: number
  /** The checked jobs: the --job names in the order given, else every row in job-name order. */
  jobs: JobHealth[]
}

/** What a verdict is drawn from: the leases read and what the command line asked for. */
export interface CheckInput {
  leases: LeaseInfo[]
  /** The --job names; empty for every job in the table. */
  jobs: string[]
  table: string
  overdueFactor: number
  /** The --grace in ms, when one was given; it only words the reason (listLeases judged with it). */
  graceMs?: number
  /** The database clock reading of the list (its rows' checkedAt, or a reading of its own when it is empty). */
  checkedAt: string
}

/** The verdict on each checked job, and on all of them. */
export function checkJobs({ leases, jobs, table, overdueFactor, graceMs, checkedAt }: CheckInput): CheckResult {
  const byName = new Map(leases.map((l) => [l.jobName, l]))
  const names = jobs.length > 0 ? [...new Set(jobs)] : leases.map((l) => l.jobName)
  const verdicts = names.map((name) => {
    const lease = byName.get(name)
    return lease === undefined ? neverClaimed(name, table) : judge(lease, { overdueFactor, graceMs })
  })
  return { healthy: verdicts.every((v) => v.healthy), checkedAt, table, overdueFactor, jobs: verdicts }
}

/** One line per unhealthy job (`name: WHY`), else one line saying all are healthy; controls escaped. */
export function renderCheck(result: CheckResult): string {
  if (result.healthy) {
    const n = result.jobs.length
    const what =
      n === 0
        ? `no jobs in ${result.table} yet, nothing to check`
        : `${n} job${n === 1 ? '' : 's'} healthy in ${result.table}`
    return `OK: ${what} (database clock ${result.checkedAt})\n`
  }
  return result.jobs
    .filter((j) => !j.healthy)
    .map((j) => `${escapeControls(j.jobName)}: ${escapeControls(j.reason ?? '')}\n`)
    .join('')
}

/** The verdict as `check --json` prints it. */
export function renderCheckJson(result: CheckResult): string {
  return `${JSON.stringify(result, null, 2)}\n`
}

/** 0 when every checked job is healthy, else 3. */
export function checkExitCode(result: CheckResult): ExitCode {
  return result.healthy ? EXIT.OK : EXIT.UNHEALTHY
}
