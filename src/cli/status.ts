/** `pg-cron-lease status`: every job, as a table for people, the JSON of listLeases() or for Prometheus. */
import { type LeaseInfo, listLeases } from '../list-leases.js'
import { BIN, type Format } from './args.js'
import { leaseQuery } from './check.js'
import { type Command, DATABASE_EXIT } from './command.js'
import { EXIT } from './exit.js'
import type { Paint } from './paint.js'
import { renderPrometheus } from './prometheus.js'
import { renderStatus } from './status-text.js'

export const status: Command = {
  summary: 'Show every job: its lease, its last run, and whether it is failing, overdue or paused',
  options: ['table', 'url', 'format', 'json', 'grace', 'overdue-factor'],
  optionHelp: { json: 'The same as --format json' },
  details:
    'Per job: the holder, when it was claimed, when its lease expires, how its last run ended\n' +
    '(LAST RUN) and how long it took (TOOK), when it is next due (NEXT DUE: "in 5 min", or "due 3 min\n' +
    'ago" once passed with no claim since; "-" while its scheduler has not said), how many of its\n' +
    'occurrences fell due unclaimed so far (MISSED), and STATE: FAILING (its last run failed),\n' +
    'OVERDUE (later than its due time, the stored one or its last claim plus its interval, by more\n' +
    'than the grace: --grace, else (--overdue-factor − 1) × the interval, at most a minute each;\n' +
    'never while paused) or PAUSED. Ages\n' +
    "are differences of two database timestamps read in one statement; this machine's clock plays\n" +
    'no part. Job names, holders and errors are printed with control characters and backslashes\n' +
    'escaped (\\n, \\x1b, \\\\).\n\n' +
    '--format json prints the array listLeases() returns, ordered by job name: jobName, holder,\n' +
    'claimedAt, leaseUntil, held, remainingMs, checkedAt, lastOutcome, lastFinishedAt,\n' +
    'lastDurationMs, lastError, lastSuccessAt, everyMs, overdue, paused, pausedUntil,\n' +
    'lastOccurrence, nextDueAt, missed. Timestamps are ISO-8601 UTC text with microseconds; under an\n' +
    'open-ended pause leaseUntil and pausedUntil are "infinity" and remainingMs is null (JSON has no\n' +
    'Infinity).\n\n' +
    "--format prometheus prints the Prometheus text format 0.0.4, ending with # EOF; node_exporter's\n" +
    'textfile collector reads it. Per job_name label, gauges: pg_cron_lease_held,\n' +
    '_last_claim_age_seconds, _last_success_age_seconds, _last_duration_seconds, _last_outcome_ok,\n' +
    '_interval_seconds, _overdue, _paused, _next_due_in_seconds (negative once late); and the\n' +
    'counter pg_cron_lease_missed_occurrences_total. A value not known yet is left out.\n\n' +
    'Examples:\n' +
    `  ${BIN} status --url postgres://app@db.internal:5432/app\n` +
    `  ${BIN} status --json | jq -r '.[] | select(.lastOutcome == "error") | .jobName'\n` +
    `  ${BIN} status --format prometheus > /var/lib/node_exporter/textfile/pg_cron_lease.prom.$$ &&\n` +
    '    mv /var/lib/node_exporter/textfile/pg_cron_lease.prom.$$ /var/lib/node_exporter/textfile/pg_cron_lease.prom',
  exitCodes: `0 printed, ${DATABASE_EXIT}, 2 usage error`,
  async run(values, context) {
    const leases = await context.connect((client) => listLeases(client, leaseQuery(values)))
    context.out(renderLeases(values.format, leases, values.table, context.paint))
    return EXIT.OK
  },
}

/** The leases in the chosen format; `table` and `paint` serve the text format only. */
export function renderLeases(format: Format, leases: LeaseInfo[], table: string, paint: Paint): string {
  if (format === 'json') return renderStatusJson(leases)
  return format === 'prometheus' ? renderPrometheus(leases) : renderStatus(leases, table, paint)
}

/** The leases exactly as listLeases returned them, as indented JSON (an Infinity becomes null). */
export function renderStatusJson(leases: LeaseInfo[]): string {
  return `${JSON.stringify(leases, null, 2)}\n`
}
