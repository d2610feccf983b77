/** Whether a job is healthy, decided once for `check`, the dashboard's `/healthz` and the NestJS health indicator. */
import { ago, duration, msBetween, span } from './human.js'
import { type LeaseInfo, type ListLeasesOptions, overdueGrace, readLeases } from './listings.js'
import { DEFAULTS } from './options.js'
import type { Queryable } from './types.js'

// failing: the last run that ended failed; died: it ended `unfinished`; reason: one sentence per cause, or null.
type JobHealth = Record<'healthy' | 'neverClaimed' | 'overdue' | 'failing' | 'died' | 'paused', boolean> & {
  jobName: string
  reason: string | null
}

/** The verdict on a table's jobs, as `check --json` prints it. */
export interface CheckResult {
  healthy: boolean
  checkedAt: string
  table: string
  overdueFactor: number
  /** The checked jobs: the names asked for in the order given, else every job in job-name order. */
  jobs: JobHealth[]
}

/** The leases read, and the job names asked for (none: every job in the table). */
interface CheckInput extends Pick<CheckResult, 'checkedAt' | 'table' | 'overdueFactor'> {
  leases: LeaseInfo[]
  jobs: readonly string[]
  /** The grace in ms, when one was given; it only words the reason (listLeases judged with it). */
  graceMs?: number | undefined
}

/** Which jobs a check judges: these names (one with no row is unhealthy), or those a predicate keeps. */
export type JobFilter = readonly string[] | ((jobName: string) => boolean)

export async function checkJobs(db: Queryable, opts: ListLeasesOptions & { jobs?: JobFilter }, read = readLeases) {
  const { jobs = [], ...query } = opts
  const { leases, checkedAt, table } = await read(db, query)
  return judgeJobs({
    leases: typeof jobs === 'function' ? leases.filter((lease) => jobs(lease.jobName)) : leases,
    jobs: typeof jobs === 'function' ? [] : jobs,
    table,
    overdueFactor: query.overdueFactor ?? DEFAULTS.overdueFactor,
    graceMs: query.overdueGraceMs,
    checkedAt,
  })
}

export function judgeJobs(input: CheckInput): CheckResult {
  const { leases, jobs, table, overdueFactor, checkedAt } = input
  const byName = new Map(leases.map((l) => [l.jobName, l]))
  const names = jobs.length > 0 ? [...new Set(jobs)] : leases.map((l) => l.jobName)
  const verdicts = names.map((name) => judge(name, byName.get(name), input))
  return { healthy: verdicts.every((v) => v.healthy), checkedAt, table, overdueFactor, jobs: verdicts }
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
  const ended = lease?.lastEndedOutcome ?? null
  const when = lease?.lastFinishedAt == null ? '' : ` ${ago(msBetween(lease.checkedAt, lease.lastFinishedAt))}`
  const error = lease?.lastError
  if (ended === 'error') reasons.push(`FAILING: last run failed${when}: ${error ?? 'no error text recorded'}`)
  if (ended === 'unfinished')
    reasons.push(`DIED: last run ended${when} with no outcome: ${error ?? 'its replica died or lost the lease'}`)
  // Said so that nobody waits for a run that cannot come.
  if ((ended === 'error' || ended === 'unfinished') && lease?.paused)
    reasons.push(`PAUSED ${untilText(lease.pausedUntil)}, so it cannot run again until then`)
  const healthy = reasons.length === 0
  return {
    jobName,
    healthy,
    neverClaimed: lease === undefined,
    overdue: lease?.overdue ?? false,
    failing: ended === 'error',
    died: ended === 'unfinished',
    paused: lease?.paused ?? false,
    reason: healthy ? null : reasons.join('; '),
  }
}

/** "until 2026-12-01T06:00:00.000000Z", or "until resumed" for an open-ended pause. */
export function untilText(pausedUntil: string | null): string {
  return pausedUntil === null || pausedUntil === 'infinity' ? 'until resumed' : `until ${pausedUntil}`
}
