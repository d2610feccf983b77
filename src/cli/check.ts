/** `pg-cron-lease check`: the library's verdict (src/verdict.ts) on every job, or those named, as an exit code. */
import { escapeControls } from '../escape.js'
import { jsonText } from '../human.js'
import { type ListLeasesOptions, readLeases } from '../list-leases.js'
import { type CheckResult, judgeJobs } from '../verdict.js'
import { BIN, type Command, DATABASE_EXIT, EXIT, type ExitCode, type Values } from './args.js'

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
    const result = await context.connect(async (client) => {
      const { leases, checkedAt } = await readLeases(client, leaseQuery(values))
      return judgeJobs({ ...values, leases, checkedAt })
    })
    context.out(values.format === 'json' ? renderCheckJson(result) : renderCheck(result))
    return checkExitCode(result)
  },
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

export const renderCheckJson: (result: CheckResult) => string = jsonText

export const checkExitCode = (result: CheckResult): ExitCode => (result.healthy ? EXIT.OK : EXIT.UNHEALTHY)

export function leaseQuery({ table, overdueFactor, graceMs }: Values): ListLeasesOptions {
  return { table, overdueFactor, overdueGraceMs: graceMs }
}
