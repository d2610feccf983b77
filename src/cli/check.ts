/**
 * `pg-cron-lease check`: the verdict over every job (or the jobs named with --job), and how it is
 * printed, as text for people and monitors that read a line, or as JSON for scripts.
 */

import { escapeControls } from '../escape.js'
import type { LeaseInfo } from '../list-leases.js'
import { type JobHealth, judge, neverClaimed } from './health.js'

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

export interface CheckInput {
  leases: LeaseInfo[]
  /** The --job names; empty for every job in the table. */
  jobs: string[]
  table: string
  overdueFactor: number
  /** The database clock reading of the list (its rows' checkedAt, or a reading of its own when it is empty). */
  checkedAt: string
}

export function checkJobs({ leases, jobs, table, overdueFactor, checkedAt }: CheckInput): CheckResult {
  const byName = new Map(leases.map((l) => [l.jobName, l]))
  const names = jobs.length > 0 ? [...new Set(jobs)] : leases.map((l) => l.jobName)
  const verdicts = names.map((name) => {
    const lease = byName.get(name)
    return lease === undefined ? neverClaimed(name, table) : judge(lease, overdueFactor)
  })
  return { healthy: verdicts.every((v) => v.healthy), checkedAt, table, overdueFactor, jobs: verdicts }
}

/**
 * One line per unhealthy job, `name: WHY`, and nothing else; when all are healthy, one line that
 * says so. Names and error texts come from the table, so their control characters are escaped.
 */
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
