/** The jobs as Prometheus text format 0.0.4 for node_exporter's textfile collector, ending `# EOF` for OpenMetrics. */
import { msBetween } from './human.js'
import { LAST_OUTCOMES, type LeaseInfo } from './listings.js'

// No timestamps (the collector refuses them); unknown values are left out, never made up.
const flag = (on: boolean) => (on ? 1 : 0)
// Rounded to the microsecond, the precision of the timestamps, so a value reads 0.000072, not 0.00007156699988991022.
const seconds = (ms: number | null) => (ms === null ? null : Math.round(ms * 1000) / 1e6)
const age = (lease: LeaseInfo, at: string | null) => (at === null ? null : Math.max(0, msBetween(lease.checkedAt, at)))

const FAMILIES: Record<string, { help: string; value(lease: LeaseInfo): number | Record<string, number> | null }> = {
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
    help: 'Whether the last run of the job that ended ended ok (1), or failed or died (0), as check judges it; absent when unknown.',
    value: (l) => (l.lastEndedOutcome === null ? null : flag(l.lastEndedOutcome === 'ok')),
  },
  pg_cron_lease_last_outcome: {
    help: 'The state of the last run of the job: 1 for the outcome label it is in (running, ok, error, unfinished), 0 for the others; absent when unknown.',
    value: (l) =>
      l.lastOutcome === null ? null : Object.fromEntries(LAST_OUTCOMES.map((s) => [s, flag(l.lastOutcome === s)])),
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
    value: (l) => (l.nextDueAt === null ? null : seconds(msBetween(l.nextDueAt, l.checkedAt))),
  },
  pg_cron_lease_missed_occurrences_total: {
    help: 'Occurrences of the job that fell due with no claim, counted by the claims after them; 0 until one is, and on a table without the occurrence columns.',
    value: (l) => l.missed,
  },
  pg_cron_lease_unfinished_runs_total: {
    help: 'Runs of the job that died: their lease ended with no outcome recorded (the replica died or lost the lease); absent on a table without its run history.',
    value: (l) => l.unfinishedRuns,
  },
}

export const escapeLabelValue = (text: string): string =>
  text.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`))

export function renderPrometheus(leases: LeaseInfo[]): string {
  const lines: string[] = []
  for (const [name, family] of Object.entries(FAMILIES)) {
    lines.push(`# HELP ${name} ${family.help}`, `# TYPE ${name} ${name.endsWith('_total') ? 'counter' : 'gauge'}`)
    for (const lease of leases) {
      const [value, job] = [family.value(lease), `job_name="${escapeLabelValue(lease.jobName)}"`]
      if (typeof value === 'number') lines.push(`${name}{${job}} ${value}`)
      else if (value !== null)
        for (const [state, v] of Object.entries(value)) lines.push(`${name}{${job},outcome="${state}"} ${v}`)
    }
  }
  lines.push('# EOF', '')
  return lines.join('\n')
}
