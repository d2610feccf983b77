/**
 * `status --format prometheus`: text format 0.0.4, one gauge family per measure (the missed count a
 * counter, declared the 0.0.4 way for the textfile collector), ending `# EOF` as OpenMetrics wants.
 * No timestamps (the collector refuses them); unknown values are left out, never made up.
 */
import { judgedByDueTime, type LeaseInfo } from '../list-leases.js'
import { msBetween } from './human.js'

interface Family {
  help: string
  value(lease: LeaseInfo): number | null
}

const flag = (on: boolean) => (on ? 1 : 0)
// Rounded to the microsecond, the precision of the timestamps, so a value reads 0.000072, not 0.00007156699988991022.
const seconds = (ms: number | null) => (ms === null ? null : Math.round(ms * 1000) / 1e6)
const age = (lease: LeaseInfo, at: string | null) => (at === null ? null : Math.max(0, msBetween(lease.checkedAt, at)))

/** Each metric family by name, in the order they are printed. */
const FAMILIES: Record<string, Family> = {
  pg_cron_lease_held: {
    help: 'Whether the lease of the job is held (1), so that a claim made now would lose, or not (0).',
    value: (l) => flag(l.held),
  },
  pg_cron_lease_last_claim_age_seconds: {
    help: 'Seconds since the last claim of the job, by the database clock.',
    value: (l) => seconds(age(l, l.claimedAt)),
  },
  pg_cron_lease_last_success_age_seconds: {
    help: 'Seconds since the last run of the job that ended ok, by the database clock; absent until one has.',
    value: (l) => seconds(age(l, l.lastSuccessAt)),
  },
  pg_cron_lease_last_duration_seconds: {
    help: 'How long the last recorded run of the job took, in seconds; absent until a run is recorded.',
    value: (l) => seconds(l.lastDurationMs),
  },
  pg_cron_lease_last_outcome_ok: {
    help: 'Whether the last recorded run of the job ended ok (1) or failed (0); absent when unknown.',
    value: (l) => (l.lastOutcome === null ? null : flag(l.lastOutcome === 'ok')),
  },
  pg_cron_lease_interval_seconds: {
    help: 'The interval of the job in seconds, declared or observed between runs; absent while unknown.',
    value: (l) => seconds(l.everyMs),
  },
  pg_cron_lease_overdue: {
    help: 'Whether the job is overdue (1): its next due time passed unclaimed for longer than the grace or, with none known, not claimed for its interval times the overdue factor; never while paused.',
    value: (l) => flag(l.overdue),
  },
  pg_cron_lease_paused: {
    help: 'Whether a pause holds the job (1), so that no replica can claim it, or not (0).',
    value: (l) => flag(l.paused),
  },
  pg_cron_lease_next_due_in_seconds: {
    help: 'Seconds until the job is next due, by the database clock, negative once that time has passed; absent while unknown.',
    // A due time older than the last claim says nothing of when the job is due (see listLeases).
    value: (l) => (judgedByDueTime(l) ? seconds(msBetween(l.nextDueAt, l.checkedAt)) : null),
  },
  pg_cron_lease_missed_occurrences_total: {
    help: 'Occurrences of the job that fell due with no claim, counted by the claims after them; 0 until one is, and on a table without the occurrence columns.',
    value: (l) => l.missed,
  },
}

export const PROMETHEUS_METRICS: readonly string[] = Object.keys(FAMILIES)

/** A label value as both formats write it: backslash, double quote and line feed escaped. */
export function escapeLabelValue(text: string): string {
  return text.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`))
}

export function renderPrometheus(leases: LeaseInfo[]): string {
  const lines: string[] = []
  for (const [name, family] of Object.entries(FAMILIES)) {
    // Only a counter's name ends in _total, as Prometheus names them; every other measure is a gauge.
    lines.push(`# HELP ${name} ${family.help}`, `# TYPE ${name} ${name.endsWith('_total') ? 'counter' : 'gauge'}`)
    for (const lease of leases) {
      const value = family.value(lease)
      if (value !== null) lines.push(`${name}{job_name="${escapeLabelValue(lease.jobName)}"} ${value}`)
    }
  }
  lines.push('# EOF', '')
  return lines.join('\n')
}
