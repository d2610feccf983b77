/**
 * Whether a job is healthy, as `status` marks it and `check` judges it: FAILING, OVERDUE (as
 * listLeases says), PAUSED. A paused job is never overdue but can still be FAILING; a named job
 * with no row is unhealthy (never ran); an overdue line names the rule that found it.
 */
import { judgedByDueTime, type LeaseInfo, type ListLeasesOptions, overdueGrace } from '../list-leases.js'
import type { Values } from './args.js'
import { ago, duration, msBetween, span } from './human.js'

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

export type Marker = 'FAILING' | 'OVERDUE' | 'PAUSED'

/** The markers `status` shows for a job, in this order. */
export function markers(lease: LeaseInfo): Marker[] {
  const found: Marker[] = []
  if (lease.lastOutcome === 'error') found.push('FAILING')
  if (lease.overdue) found.push('OVERDUE')
  if (lease.paused) found.push('PAUSED')
  return found
}

/** What status and check ask listLeases for: the table, and the rules that judge a job overdue. */
export function leaseQuery({ table, overdueFactor, graceMs }: Values): ListLeasesOptions {
  return { table, overdueFactor, overdueGraceMs: graceMs }
}

/** What a job is judged with: the --overdue-factor, and the --grace in ms if one was given. */
export interface Rules {
  overdueFactor: number
  graceMs?: number
}

export function judge(lease: LeaseInfo, { overdueFactor, graceMs }: Rules): JobHealth {
  const failing = lease.lastOutcome === 'error'
  const reasons: string[] = []
  const grace = `grace ${duration(overdueGrace(lease.everyMs, graceMs, overdueFactor))}`
  if (lease.overdue && judgedByDueTime(lease)) {
    const late = msBetween(lease.checkedAt, lease.nextDueAt)
    reasons.push(`OVERDUE: due ${lease.nextDueAt}, not claimed for ${span(late)} (${grace})`)
  } else if (lease.overdue) {
    // With no stored due time, overdue implies a known interval: the due time is the last claim plus it.
    const every = lease.everyMs === null ? '' : `, every ${duration(lease.everyMs)}`
    reasons.push(`OVERDUE: last claimed ${ago(msBetween(lease.checkedAt, lease.claimedAt))}${every} (${grace})`)
  }
  if (failing) {
    const when = lease.lastFinishedAt === null ? '' : ` ${ago(msBetween(lease.checkedAt, lease.lastFinishedAt))}`
    reasons.push(`FAILING: last run failed${when}: ${lease.lastError ?? 'no error text recorded'}`)
    // Said so that nobody waits for a retry that cannot come.
    if (lease.paused) reasons.push(`PAUSED ${untilText(lease.pausedUntil)}, so it cannot run again until then`)
  }
  const healthy = reasons.length === 0
  return {
    jobName: lease.jobName,
    healthy,
    neverClaimed: false,
    overdue: lease.overdue,
    failing,
    paused: lease.paused,
    reason: healthy ? null : reasons.join('; '),
  }
}

export function neverClaimed(jobName: string, table: string): JobHealth {
  return {
    jobName,
    healthy: false,
    neverClaimed: true,
    overdue: false,
    failing: false,
    paused: false,
    reason: `NEVER CLAIMED: no row in ${table}: never claimed, or a typo in the name`,
  }
}

/** "until 2026-12-01T06:00:00.000000Z", or "until resumed" for an open-ended pause. */
export function untilText(pausedUntil: string | null): string {
  return pausedUntil === null || pausedUntil === 'infinity' ? 'until resumed' : `until ${pausedUntil}`
}
