/**
 * `pg-cron-lease status --format prometheus`: the leases as gauges in the Prometheus text
 * exposition format (version 0.0.4), one family per measure with HELP and TYPE, one sample per job
 * labelled `job_name`.
 *
 * The output ends with `# EOF`, so the same bytes are also a valid OpenMetrics 1.0 text exposition:
 * to a 0.0.4 parser (Prometheus, and node_exporter's textfile collector, which parses files with
 * it) a `#` line that is not HELP or TYPE is a comment. For the same reason the HELP texts hold no
 * backslash, double quote or line feed, whose escaping differs between the two formats; label values
 * escape exactly those three, the same way in both. No sample carries a timestamp: the textfile
 * collector refuses files that do.
 *
 * A sample whose value is unknown (no run recorded yet, no success yet, an unknown interval) is
 * left out rather than printed as a made-up number. Ages are checkedAt minus another database
 * timestamp, so the clock of the machine that runs this plays no part.
 */
import type { LeaseInfo } from '../list-leases.js'
import { msBetween } from './human.js'

interface Family {
  name: string
  help: string
  value(lease: LeaseInfo): number | null
}

const flag = (on: boolean) => (on ? 1 : 0)
// Rounded to the microsecond, the precision of the timestamps, so a value reads 0.000072, not 0.00007156699988991022.
const seconds = (ms: number | null) => (ms === null ? null : Math.round(ms * 1000) / 1e6)
const age = (lease: LeaseInfo, at: string | null) => (at === null ? null : Math.max(0, msBetween(lease.checkedAt, at)))

const FAMILIES: Family[] = [
  {
    name: 'pg_cron_lease_held',
    help: 'Whether the lease of the job is held (1), so that a claim made now would lose, or not (0).',
    value: (l) => flag(l.held),
  },
  {
    name: 'pg_cron_lease_last_claim_age_seconds',
    help: 'Seconds since the last claim of the job, by the database clock.',
    value: (l) => seconds(age(l, l.claimedAt)),
  },
  {
    name: 'pg_cron_lease_last_success_age_seconds',
    help: 'Seconds since the last run of the job that ended ok, by the database clock; absent until one has.',
    value: (l) => seconds(age(l, l.lastSuccessAt)),
  },
  {
    name: 'pg_cron_lease_last_duration_seconds',
    help: 'How long the last recorded run of the job took, in seconds; absent until a run is recorded.',
    value: (l) => seconds(l.lastDurationMs),
  },
  {
    name: 'pg_cron_lease_last_outcome_ok',
    help: 'Whether the last recorded run of the job ended ok (1) or failed (0); absent when unknown.',
    value: (l) => (l.lastOutcome === null ? null : flag(l.lastOutcome === 'ok')),
  },
  {
    name: 'pg_cron_lease_interval_seconds',
    help: 'The interval of the job in seconds, declared or observed between runs; absent while unknown.',
    value: (l) => seconds(l.everyMs),
  },
  {
    name: 'pg_cron_lease_overdue',
    help: 'Whether the job is overdue (1): not claimed for its interval times the overdue factor, and not paused.',
    value: (l) => flag(l.overdue),
  },
  {
    name: 'pg_cron_lease_paused',
    help: 'Whether a pause holds the job (1), so that no replica can claim it, or not (0).',
    value: (l) => flag(l.paused),
  },
]

/** The metric names, in the order they are printed. */
export const PROMETHEUS_METRICS: readonly string[] = FAMILIES.map((f) => f.name)

/** A label value as both formats write it: backslash, double quote and line feed escaped. */
export function escapeLabelValue(text: string): string {
  return text.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`))
}

export function renderPrometheus(leases: LeaseInfo[]): string {
  const lines: string[] = []
  for (const family of FAMILIES) {
    lines.push(`# HELP ${family.name} ${family.help}`, `# TYPE ${family.name} gauge`)
    for (const lease of leases) {
      const value = family.value(lease)
      if (value !== null) lines.push(`${family.name}{job_name="${escapeLabelValue(lease.jobName)}"} ${value}`)
    }
  }
  lines.push('# EOF', '')
  return lines.join('\n')
}
