/**
 * What the command prints, fed LeaseInfo rows directly: status as a table, as JSON and as a
 * Prometheus exposition, check's verdict as text and JSON with its exit code, and migrate's line.
 * No database: the rows are what listLeases returns, with every timestamp fixed relative to one
 * database clock reading, so every age is exact. The same outputs against real rows, through the
 * bin, are in test/integration/cli/cli.test.ts.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { installSkew } from '../../dev/skew-clock.ts'
import { renderHistory } from '../../src/cli/history.ts'
import { describeMigration } from '../../src/cli/migrate.ts'
import { checkExitCode, renderCheck, renderLeases, renderStatus } from '../../src/cli/status.ts'
import { escapeControls } from '../../src/format-value.ts'
import { jsonText, type Paint, painter } from '../../src/human.ts'
import type { LeaseInfo, RunInfo } from '../../src/listings.ts'
import { escapeLabelValue, renderPrometheus } from '../../src/prometheus.ts'
import { judgeJobs as checkJobs } from '../../src/verdict.ts'
import { type Family, parseExposition } from '../helpers/prometheus.ts'

/** The database clock reading every row below was listed at. */
const CHECKED = '2026-11-30T12:00:00.000000Z'
const TABLE = 'cli_jobs'
const PLAIN = painter({ isTTY: false }, {})

/** A database timestamp `seconds` after CHECKED (before it when negative). */
function at(seconds: number): string {
  return new Date(Date.parse(CHECKED) + seconds * 1000).toISOString().replace(/Z$/, '000Z')
}

/**
 * A row as listLeases returns it: claimed now, held for an hour, nothing recorded. The last ended
 * run's outcome is the last run's, unless given (or that one is running).
 */
function lease(jobName: string, fields: Partial<LeaseInfo> = {}): LeaseInfo {
  const last = fields.lastOutcome ?? null
  return {
    jobName,
    holder: 'web-1',
    claimedAt: CHECKED,
    leaseUntil: at(3600),
    held: true,
    remainingMs: 3_600_000,
    checkedAt: CHECKED,
    lastOutcome: null,
    lastEndedOutcome: last === 'running' ? null : last,
    lastStartedAt: null,
    lastFinishedAt: null,
    lastDurationMs: null,
    lastError: null,
    lastSuccessAt: null,
    everyMs: null,
    overdue: false,
    paused: false,
    pausedUntil: null,
    resumedAt: null,
    lastOccurrence: null,
    nextDueAt: null,
    missed: 0,
    unfinishedRuns: null,
    ...fields,
  }
}

const MIN = 60
const HOUR = 3600

/**
 * One job of each kind, in job-name order:
 * - billing:hourly       held, last run ok, every 1 h: healthy
 * - import:nightly       claimed 3 h 20 min ago, every 1 h: OVERDUE
 * - legacy               a row written without a holder, no run recorded
 * - report:daily         last run failed, never succeeded: FAILING
 * - sync:failing-paused  last run failed, paused until resumed: FAILING and PAUSED
 * - sync:paused          claimed 3 h 20 min ago, every 1 h, paused for 2 h 30 min: PAUSED, not overdue
 * - unknown:outcome      last run recorded without an outcome (as a node-cron coordinator run is)
 */
const SEVERAL: LeaseInfo[] = [
  lease('billing:hourly', {
    holder: 'web-1:4242',
    claimedAt: at(-(3 * MIN + 10)),
    leaseUntil: at(47 * MIN + 30),
    remainingMs: (47 * MIN + 30) * 1000,
    lastOutcome: 'ok',
    lastFinishedAt: at(-(2 * MIN + 30)),
    lastDurationMs: 4180,
    lastSuccessAt: at(-(2 * MIN + 30)),
    everyMs: 3_600_000,
  }),
  lease('import:nightly', {
    holder: 'web-2:77',
    claimedAt: at(-(3 * HOUR + 20 * MIN)),
    leaseUntil: at(-(2 * HOUR + 20 * MIN)),
    held: false,
    remainingMs: 0,
    lastOutcome: 'ok',
    lastFinishedAt: at(-(3 * HOUR + 10 * MIN)),
    lastDurationMs: 65_000,
    lastSuccessAt: at(-(3 * HOUR + 10 * MIN)),
    everyMs: 3_600_000,
    overdue: true,
  }),
  lease('legacy', {
    holder: null,
    claimedAt: at(-(10 * MIN + 30)),
    leaseUntil: at(20 * MIN + 30),
    remainingMs: (20 * MIN + 30) * 1000,
  }),
  lease('report:daily', {
    holder: 'web-3',
    claimedAt: at(-(6 * MIN + 30)),
    leaseUntil: at(-(5 * MIN + 30)),
    held: false,
    remainingMs: 0,
    lastOutcome: 'error',
    lastFinishedAt: at(-(5 * MIN + 30)),
    lastDurationMs: 850,
    lastError: 'Error: boom',
  }),
  lease('sync:failing-paused', {
    holder: 'web-4',
    claimedAt: at(-(6 * MIN + 30)),
    leaseUntil: 'infinity',
    remainingMs: Number.POSITIVE_INFINITY,
    lastOutcome: 'error',
    lastFinishedAt: at(-(5 * MIN + 30)),
    lastDurationMs: 850,
    lastError: 'TypeError: no such row',
    paused: true,
    pausedUntil: 'infinity',
  }),
  lease('sync:paused', {
    holder: 'web-4',
    claimedAt: at(-(3 * HOUR + 20 * MIN)),
    leaseUntil: at(2 * HOUR + 30 * MIN),
    remainingMs: (2 * HOUR + 30 * MIN) * 1000,
    lastOutcome: 'ok',
    lastFinishedAt: at(-(3 * HOUR + 10 * MIN)),
    lastDurationMs: 4180,
    lastSuccessAt: at(-(3 * HOUR + 10 * MIN)),
    everyMs: 3_600_000,
    paused: true,
    pausedUntil: at(2 * HOUR + 30 * MIN),
  }),
  lease('unknown:outcome', {
    holder: 'web-5',
    claimedAt: at(-(3 * MIN + 10)),
    leaseUntil: at(47 * MIN + 30),
    remainingMs: (47 * MIN + 30) * 1000,
    lastFinishedAt: at(-(2 * MIN + 30)),
    lastDurationMs: 0.4,
  }),
]

/** A row of a table of the original shape: no outcome, interval or pause columns. */
const OLD_SHAPE = lease('old', {
  holder: 'h',
  claimedAt: at(-(3 * MIN + 10)),
  leaseUntil: at(47 * MIN + 30),
  remainingMs: (47 * MIN + 30) * 1000,
})

/**
 * Jobs whose scheduler names its occurrences, every 5 min unless said, in job-name order:
 * - due:ahead             next due in 2 min 30 s, 3 occurrences missed so far: healthy
 * - due:grace             due 30 s ago, unclaimed: within the default grace (its interval, at most 1 min)
 * - due:late              due 4 min 30 s ago, unclaimed, 1 missed before: OVERDUE
 * - due:paused            due 2 h 55 min ago, paused until resumed: PAUSED, not overdue
 * - due:unknown-interval  due 2 min 30 s ago, interval unknown (grace 1 min): OVERDUE
 */
const OCCURRENCES: LeaseInfo[] = [
  lease('due:ahead', {
    claimedAt: at(-(2 * MIN + 30)),
    leaseUntil: at(30),
    remainingMs: 30_000,
    everyMs: 300_000,
    lastOccurrence: at(-(2 * MIN + 30)),
    nextDueAt: at(2 * MIN + 30),
    missed: 3,
  }),
  lease('due:grace', {
    claimedAt: at(-(5 * MIN + 30)),
    leaseUntil: at(-(2 * MIN + 30)),
    held: false,
    remainingMs: 0,
    everyMs: 300_000,
    lastOccurrence: at(-(5 * MIN + 30)),
    nextDueAt: at(-30),
  }),
  lease('due:late', {
    claimedAt: at(-(9 * MIN + 30)),
    leaseUntil: at(-(6 * MIN + 30)),
    held: false,
    remainingMs: 0,
    everyMs: 300_000,
    overdue: true,
    lastOccurrence: at(-(9 * MIN + 30)),
    nextDueAt: at(-(4 * MIN + 30)),
    missed: 1,
  }),
  lease('due:paused', {
    claimedAt: at(-3 * HOUR),
    leaseUntil: 'infinity',
    remainingMs: Number.POSITIVE_INFINITY,
    everyMs: 300_000,
    paused: true,
    pausedUntil: 'infinity',
    lastOccurrence: at(-3 * HOUR),
    nextDueAt: at(-(2 * HOUR + 55 * MIN)),
  }),
  lease('due:unknown-interval', {
    claimedAt: at(-(7 * MIN + 30)),
    leaseUntil: at(-(6 * MIN + 30)),
    held: false,
    remainingMs: 0,
    overdue: true,
    lastOccurrence: at(-(7 * MIN + 30)),
    nextDueAt: at(-(2 * MIN + 30)),
  }),
]

/** An ANSI SGR sequence (colour on or off) with the given code, or any code. */
const sgr = (code = '\\d+') => new RegExp(`${String.fromCharCode(27)}\\[${code}m`, 'g')

/** The table's rows (after the summary and the blank line), split into cells. */
const cells = (text: string) => text.split('\n').map((l) => l.split(/ {3,}/))

describe('status as text: one row per job, with ages by the database clock', () => {
  test('a readable table: holder, claim, expiry, last run, its duration and a FAILING / OVERDUE / PAUSED marker', () => {
    const text = renderStatus(SEVERAL, TABLE, PLAIN)
    const lines = text.split('\n')
    assert.equal(lines[0], `${TABLE}: 7 jobs, 5 held, 2 failing, 1 overdue, 2 paused (database clock ${CHECKED})`)
    assert.equal(lines[1], '')
    assert.deepEqual(cells(lines.slice(2).join('\n')), [
      ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES', 'LAST RUN', 'TOOK', 'NEXT DUE', 'MISSED', 'STATE'],
      ['billing:hourly', 'web-1:4242', '3 min ago', 'in 47 min', 'ok 2 min ago', '4.1 s', '-', '0'],
      ['import:nightly', 'web-2:77', '3 h ago', 'expired 2 h ago', 'ok 3 h ago', '1 min 5 s', '-', '0', 'OVERDUE'],
      ['legacy', '-', '10 min ago', 'in 20 min', '-', '-', '-', '0'],
      ['report:daily', 'web-3', '6 min ago', 'expired 5 min ago', 'error 5 min ago', '850 ms', '-', '0', 'FAILING'],
      [
        'sync:failing-paused',
        'web-4',
        '6 min ago',
        'when resumed',
        'error 5 min ago',
        '850 ms',
        '-',
        '0',
        'FAILING PAUSED',
      ],
      ['sync:paused', 'web-4', '3 h ago', 'in 2 h', 'ok 3 h ago', '4.1 s', '-', '0', 'PAUSED'],
      ['unknown:outcome', 'web-5', '3 min ago', 'in 47 min', 'ran 2 min ago', 'under 1 ms', '-', '0'],
      [''],
      ['Pauses:'],
      ['  sync:failing-paused: paused until resumed: not overdue while paused'],
      [`  sync:paused: paused until ${at(2 * HOUR + 30 * MIN)}: not overdue while paused`],
      [''],
      ['Last errors:'],
      ['  report:daily: Error: boom'],
      ['  sync:failing-paused: TypeError: no such row'],
      [''],
    ])
    assert.doesNotMatch(text, sgr(), 'no colour when stdout is not a terminal')
    assert.equal(renderLeases('text', SEVERAL, TABLE, PLAIN), text, '--format text is the default table')
  })

  test('a row of a table of the original shape has empty run columns and no marker', () => {
    const lines = renderStatus([OLD_SHAPE], 'old_shape', PLAIN).split('\n')
    assert.equal(lines[0], `old_shape: 1 job, 1 held (database clock ${CHECKED})`)
    assert.deepEqual(cells(lines[3]!), [['old', 'h', '3 min ago', 'in 47 min', '-', '-', '-', '0']])
  })

  test('NEXT DUE says when a job is next due, or how long ago it fell due unclaimed; MISSED counts the occurrences missed so far', () => {
    const lines = renderStatus(OCCURRENCES, TABLE, PLAIN).split('\n')
    assert.equal(lines[0], `${TABLE}: 5 jobs, 2 held, 2 overdue, 1 paused (database clock ${CHECKED})`)
    assert.deepEqual(
      cells(lines.slice(2, 8).join('\n')).map((row) => row.slice(6)),
      [
        ['NEXT DUE', 'MISSED', 'STATE'],
        ['in 2 min', '3'],
        ['due 30 s ago', '0'],
        ['due 4 min ago', '1', 'OVERDUE'],
        ['due 2 h ago', '0', 'PAUSED'],
        ['due 2 min ago', '0', 'OVERDUE'],
      ],
    )
    assert.equal(lines[8], '', 'nothing failing, so no errors listed')
  })

  test('a late due time is red once overdue and yellow within the grace; a missed count above 0 is yellow', () => {
    const text = renderStatus(OCCURRENCES, TABLE, painter({ isTTY: true }, {}))
    // A cell is painted with the spaces that pad it to its column's width.
    const painted = (code: string, what: string) => new RegExp(`${sgr(code).source}${what} *${sgr('39').source}`)
    assert.match(text, painted('31', 'due 4 min ago'))
    assert.match(text, painted('33', 'due 30 s ago'))
    assert.match(text, painted('33', '3'))
    assert.doesNotMatch(text, painted('3[13]', 'due 2 h ago'), 'a pause explains a late due time')
    assert.doesNotMatch(text, painted('3[13]', 'in 2 min'))
  })

  test('an empty table says so', () => {
    assert.equal(renderStatus([], TABLE, PLAIN), `No leases in ${TABLE} yet: a job appears after its first claim.\n`)
  })

  test('control characters in a job name or holder are shown as escapes, so they cannot drive the terminal or forge a row', () => {
    const shown = new Map([
      ['job\nevil:hourly   web-9:1   just now   in 59 min', 'job\\nevil:hourly   web-9:1   just now   in 59 min'],
      ['red\x1b[31mtext\x1b[0m', 'red\\x1b[31mtext\\x1b[0m'],
      ['nel\u0085csi\u009b2J', 'nel\\x85csi\\x9b2J'],
      ['ls\u2028ps\u2029end', 'ls\\u2028ps\\u2029end'],
      ['tab\there\rcr\x7fdel\\n', 'tab\\there\\rcr\\x7fdel\\\\n'],
      ['plain', 'plain'],
    ])
    const holder = 'h\x1b]0;title\x07'
    const leases = [...shown.keys()].map((jobName) =>
      lease(jobName, {
        holder,
        claimedAt: at(-(3 * MIN + 10)),
        leaseUntil: at(47 * MIN + 30),
        remainingMs: (47 * MIN + 30) * 1000,
        lastOutcome: 'ok',
        lastFinishedAt: at(-(2 * MIN + 30)),
        lastDurationMs: 4180,
        lastSuccessAt: at(-(2 * MIN + 30)),
      }),
    )
    const text = renderStatus(leases, TABLE, PLAIN)
    const raw = [...text].filter((c) => c !== '\n' && /[\p{Cc}\u2028\u2029]/u.test(c))
    assert.deepEqual(raw, [], 'no control character reaches the terminal but the line ends')

    // Rows in the order given, columns as wide as their widest escaped cell.
    const rows = leases.map((l) => [
      shown.get(l.jobName)!,
      'h\\x1b]0;title\\x07',
      '3 min ago',
      'in 47 min',
      'ok 2 min ago',
      '4.1 s',
      '-',
      '0',
      '',
    ])
    const header = ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES', 'LAST RUN', 'TOOK', 'NEXT DUE', 'MISSED', 'STATE']
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
    const line = (row: string[]) =>
      row
        .map((c, i) => (i === header.length - 1 ? c : c.padEnd(widths[i]!)))
        .join('   ')
        .trimEnd()
    assert.deepEqual(text.split('\n').slice(2), [line(header), ...rows.map(line), ''])

    const printed: LeaseInfo[] = JSON.parse(jsonText(leases))
    assert.deepEqual(
      printed.map((l) => l.jobName),
      [...shown.keys()],
      '--json keeps the exact names',
    )
    assert.ok(
      printed.every((l) => l.holder === holder),
      '--json keeps the exact holder',
    )
  })

  test('colours only on a terminal or with FORCE_COLOR, and never with NO_COLOR; the text is the same either way', () => {
    const job = lease('job', {
      claimedAt: at(-(5 * MIN + 30)),
      leaseUntil: at(30 * MIN + 30),
      remainingMs: (30 * MIN + 30) * 1000,
      lastOutcome: 'ok',
      lastFinishedAt: at(-(2 * MIN + 30)),
      lastDurationMs: 4180,
    })
    const render = (tty: boolean, env: Record<string, string>) =>
      renderStatus([job], TABLE, painter({ isTTY: tty }, env))
    const forced = render(false, { FORCE_COLOR: '1' })
    assert.match(
      forced,
      new RegExp(`${sgr('32').source}in 30 min${sgr('39').source}`),
      'a held lease is green when colours are on',
    )
    assert.equal(render(true, {}), forced, 'a terminal turns colours on')
    for (const off of [
      render(false, { FORCE_COLOR: '1', NO_COLOR: '1' }),
      render(true, { NO_COLOR: '1' }),
      render(false, {}),
      render(false, { FORCE_COLOR: '0' }),
    ]) {
      assert.doesNotMatch(off, sgr())
      assert.equal(off, forced.replace(sgr(), ''))
    }
  })
})

describe('status --format json prints exactly the rows listLeases returns', () => {
  test('every field, in the order listLeases gives them; an open-ended pause has remainingMs null', () => {
    const printed: Record<string, unknown>[] = JSON.parse(jsonText(SEVERAL))
    assert.deepEqual(
      printed.map((l) => Object.keys(l)),
      SEVERAL.map((l) => Object.keys(l)),
    )
    assert.deepEqual(
      printed,
      SEVERAL.map((l) => ({ ...l, remainingMs: l.remainingMs === Number.POSITIVE_INFINITY ? null : l.remainingMs })),
    )
    const paused = printed.find((l) => l.jobName === 'sync:failing-paused')!
    assert.deepEqual([paused.leaseUntil, paused.pausedUntil, paused.remainingMs], ['infinity', 'infinity', null])
    const failing = printed.find((l) => l.jobName === 'report:daily')!
    assert.deepEqual([failing.lastOutcome, failing.lastError, failing.lastDurationMs], ['error', 'Error: boom', 850])
    assert.equal(renderLeases('json', SEVERAL, TABLE, PLAIN), jsonText(SEVERAL))
  })

  test('lastOccurrence, nextDueAt and missed are printed as listLeases returns them', () => {
    const printed: Record<string, unknown>[] = JSON.parse(jsonText(OCCURRENCES))
    assert.deepEqual(
      printed.map(({ jobName, lastOccurrence, nextDueAt, missed }) => ({ jobName, lastOccurrence, nextDueAt, missed })),
      OCCURRENCES.map(({ jobName, lastOccurrence, nextDueAt, missed }) => ({
        jobName,
        lastOccurrence,
        nextDueAt,
        missed,
      })),
    )
    assert.deepEqual(
      [printed[0]!.nextDueAt, printed[0]!.missed],
      ['2026-11-30T12:02:30.000000Z', 3],
      'the timestamp text and the count, unchanged',
    )
    assert.deepEqual(
      printed.map((l) => Object.keys(l)),
      OCCURRENCES.map((l) => Object.keys(l)),
    )
  })

  test('an empty table prints []', () => {
    assert.equal(jsonText([]), '[]\n')
  })
})

describe('status --format prometheus prints a text exposition that parses strictly', () => {
  /** A job name with everything a label value must escape: a quote, a backslash and a line feed. */
  const AWKWARD = 'say "hi"\\now\nthen'

  /** One family's samples as { job name: value }. */
  function values(families: Map<string, Family>, name: string): Record<string, number> {
    const family = families.get(name)
    assert.ok(family, `family ${name}`)
    return Object.fromEntries(family.samples.map((s) => [s.labels.job_name!, s.value]))
  }

  test('every family has HELP and TYPE (a gauge, but the two counters), every sample is labelled job_name (and the outcome of the last run), and label values unescape to the exact job names', () => {
    const leases = [...SEVERAL, lease(AWKWARD)]
    const text = renderPrometheus(leases)
    assert.ok(text.endsWith('\n# EOF\n'), 'it ends with # EOF')
    const families = parseExposition(text)
    assert.deepEqual(
      [...families.keys()],
      [
        'pg_cron_lease_held',
        'pg_cron_lease_last_claim_age_seconds',
        'pg_cron_lease_last_success_age_seconds',
        'pg_cron_lease_last_duration_seconds',
        'pg_cron_lease_last_outcome_ok',
        'pg_cron_lease_last_outcome',
        'pg_cron_lease_interval_seconds',
        'pg_cron_lease_overdue',
        'pg_cron_lease_paused',
        'pg_cron_lease_next_due_in_seconds',
        'pg_cron_lease_missed_occurrences_total',
        'pg_cron_lease_unfinished_runs_total',
      ],
    )
    assert.deepEqual(
      [...parseExposition(renderPrometheus([])).keys()],
      [...families.keys()],
      'every family, with no job too',
    )
    for (const [name, family] of families) {
      assert.equal(family.type, name.endsWith('_total') ? 'counter' : 'gauge', name)
      assert.ok(family.help.length > 10, `${name} has a HELP text`)
      const labels = name === 'pg_cron_lease_last_outcome' ? ['job_name', 'outcome'] : ['job_name']
      for (const sample of family.samples) assert.deepEqual(Object.keys(sample.labels), labels, name)
    }
    const names = leases.map((l) => l.jobName)
    for (const always of [
      'pg_cron_lease_held',
      'pg_cron_lease_last_claim_age_seconds',
      'pg_cron_lease_overdue',
      'pg_cron_lease_paused',
      'pg_cron_lease_missed_occurrences_total',
    ]) {
      assert.deepEqual(Object.keys(values(families, always)), names, `${always} has one sample per job, in job order`)
    }
    assert.ok(text.includes('{job_name="say \\"hi\\"\\\\now\\nthen"}'), 'the label value is escaped in the text')
    assert.equal(renderLeases('prometheus', leases, TABLE, PLAIN), text)
  })

  test('a label value escapes exactly a backslash, a double quote and a line feed', () => {
    assert.equal(escapeLabelValue('a\\b"c\nd\te\r'), 'a\\\\b\\"c\\nd\te\r')
  })

  test('the values: flags, ages by the database clock, durations in seconds; an unknown value has no sample', () => {
    const families = parseExposition(renderPrometheus(SEVERAL))
    assert.deepEqual(values(families, 'pg_cron_lease_held'), {
      'billing:hourly': 1,
      'import:nightly': 0,
      legacy: 1,
      'report:daily': 0,
      'sync:failing-paused': 1,
      'sync:paused': 1,
      'unknown:outcome': 1,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_overdue'), {
      'billing:hourly': 0,
      'import:nightly': 1,
      legacy: 0,
      'report:daily': 0,
      'sync:failing-paused': 0,
      'sync:paused': 0,
      'unknown:outcome': 0,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_paused'), {
      'billing:hourly': 0,
      'import:nightly': 0,
      legacy: 0,
      'report:daily': 0,
      'sync:failing-paused': 1,
      'sync:paused': 1,
      'unknown:outcome': 0,
    })
    // No run recorded (legacy) or no outcome known (unknown:outcome): no sample rather than a made-up 0.
    assert.deepEqual(values(families, 'pg_cron_lease_last_outcome_ok'), {
      'billing:hourly': 1,
      'import:nightly': 1,
      'report:daily': 0,
      'sync:failing-paused': 0,
      'sync:paused': 1,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_last_duration_seconds'), {
      'billing:hourly': 4.18,
      'import:nightly': 65,
      'report:daily': 0.85,
      'sync:failing-paused': 0.85,
      'sync:paused': 4.18,
      'unknown:outcome': 0.0004,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_interval_seconds'), {
      'billing:hourly': 3600,
      'import:nightly': 3600,
      'sync:paused': 3600,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_last_claim_age_seconds'), {
      'billing:hourly': 190,
      'import:nightly': 12_000,
      legacy: 630,
      'report:daily': 390,
      'sync:failing-paused': 390,
      'sync:paused': 12_000,
      'unknown:outcome': 190,
    })
    assert.deepEqual(
      values(families, 'pg_cron_lease_last_success_age_seconds'),
      { 'billing:hourly': 150, 'import:nightly': 11_400, 'sync:paused': 11_400 },
      'only jobs that ever succeeded',
    )
  })

  test('next due in seconds: from checkedAt to nextDueAt, negative once late, and no sample without a due time', () => {
    const families = parseExposition(renderPrometheus([...SEVERAL, ...OCCURRENCES]))
    assert.deepEqual(values(families, 'pg_cron_lease_next_due_in_seconds'), {
      'due:ahead': 150,
      'due:grace': -30,
      'due:late': -270,
      'due:paused': -(2 * HOUR + 55 * MIN),
      'due:unknown-interval': -150,
    })
    const claimedAt = '2026-11-30T11:00:00.000000Z'
    const rounded = parseExposition(
      renderPrometheus([
        lease('a', { claimedAt, nextDueAt: '2026-11-30T12:00:00.000072Z' }),
        lease('b', { claimedAt, nextDueAt: '2026-11-30T11:59:59.999928Z' }),
        lease('c', { claimedAt, nextDueAt: CHECKED }),
        // A due time is the job's whenever it was stored, even one before the last claim.
        lease('stale', { claimedAt, nextDueAt: '2026-11-30T10:59:59.000000Z' }),
        lease('none', { claimedAt, everyMs: 3_600_000 }),
      ]),
    )
    assert.deepEqual(
      values(rounded, 'pg_cron_lease_next_due_in_seconds'),
      { a: 0.000072, b: -0.000072, c: 0, stale: -3601 },
      'no sample without a stored due time, whatever the interval',
    )
    assert.match(
      renderPrometheus([lease('c', { claimedAt, nextDueAt: CHECKED })]),
      /^pg_cron_lease_next_due_in_seconds\{job_name="c"\} 0$/m,
    )
  })

  test('missed occurrences: a counter with a sample for every job, the missed count as listLeases returns it', () => {
    const text = renderPrometheus([...SEVERAL, ...OCCURRENCES])
    assert.match(text, /^# TYPE pg_cron_lease_missed_occurrences_total counter$/m)
    const missed = values(parseExposition(text), 'pg_cron_lease_missed_occurrences_total')
    assert.deepEqual(
      Object.keys(missed),
      [...SEVERAL, ...OCCURRENCES].map((l) => l.jobName),
    )
    assert.deepEqual(Object.fromEntries(Object.entries(missed).filter(([name]) => name.startsWith('due:'))), {
      'due:ahead': 3,
      'due:grace': 0,
      'due:late': 1,
      'due:paused': 0,
      'due:unknown-interval': 0,
    })
    assert.ok(
      SEVERAL.every((l) => missed[l.jobName] === 0),
      'a job whose scheduler names no occurrence counts none',
    )
  })

  test('an age is rounded to the microsecond, and never negative', () => {
    const families = parseExposition(
      renderPrometheus([
        lease('a', { claimedAt: '2026-11-30T11:59:59.999928Z' }),
        lease('b', { claimedAt: '2026-11-30T12:00:00.000001Z' }),
      ]),
    )
    assert.deepEqual(values(families, 'pg_cron_lease_last_claim_age_seconds'), { a: 0.000072, b: 0 })
  })

  test('an empty table prints the declarations and # EOF only; a table of the original shape has no run samples', () => {
    const text = renderPrometheus([])
    assert.ok(text.endsWith('\n# EOF\n'))
    const empty = parseExposition(text)
    assert.equal(empty.size, 12)
    for (const family of empty.values()) assert.deepEqual(family.samples, [])
    const old = parseExposition(renderPrometheus([OLD_SHAPE]))
    const sampled = [...old].filter(([, f]) => f.samples.length > 0).map(([name]) => name)
    assert.deepEqual(sampled, [
      'pg_cron_lease_held',
      'pg_cron_lease_last_claim_age_seconds',
      'pg_cron_lease_overdue',
      'pg_cron_lease_paused',
      'pg_cron_lease_missed_occurrences_total',
    ])
    assert.deepEqual(values(old, 'pg_cron_lease_missed_occurrences_total'), { old: 0 }, 'nothing counted: 0')
  })

  test("the test's reader refuses what either format or the textfile collector refuses", () => {
    const good = '# HELP m Help.\n# TYPE m gauge\nm{job_name="a\\"b\\\\c\\nd"} 1.5\n# EOF\n'
    assert.deepEqual(parseExposition(good).get('m')!.samples, [{ labels: { job_name: 'a"b\\c\nd' }, value: 1.5 }])
    for (const bad of [
      '# HELP m Help.\n# TYPE m gauge\nm 1\n', // no # EOF
      '# TYPE m gauge\nm 1\n# EOF\n', // no HELP
      '# HELP m Help.\nm 1\n# EOF\n', // no TYPE
      'm 1\n# EOF\n', // undeclared
      '# HELP m Help.\n# TYPE m gauge\nm 1 1700000000000\n# EOF\n', // a timestamp
      '# HELP m Help.\n# TYPE m gauge\nm one\n# EOF\n', // not a number
      '# HELP m Help.\n# TYPE m gauge\nm{job_name="a\\tb"} 1\n# EOF\n', // an escape the formats do not have
      '# HELP m Help.\n# TYPE m gauge\nm{job_name="a"b"} 1\n# EOF\n', // an unescaped quote
      '# HELP m Help.\n# TYPE m gauge\nm{job_name="a"} 1\nm{job_name="a"} 2\n# EOF\n', // the same labels twice
      '# HELP m Say "hi".\n# TYPE m gauge\nm 1\n# EOF\n', // a quote in HELP
      '# HELP m Help.\n# TYPE m gauge\n\nm 1\n# EOF\n', // a blank line
      '# HELP m Help.\n# TYPE m gauge\n# HELP n Help.\n# TYPE n gauge\nm 1\n# EOF\n', // m comes back after n
      '# HELP m Help.\n# TYPE m gauge\n# a comment\nm 1\n# EOF\n', // a comment
    ]) {
      assert.throws(() => parseExposition(bad), Error, JSON.stringify(bad))
    }
  })
})

describe('check: one OK line and exit 0 when every job is healthy; one line per unhealthy job and exit 3', () => {
  const verdict = (leases: LeaseInfo[], jobs: string[] = [], overdueFactor = 2) =>
    checkJobs({ leases, jobs, table: TABLE, overdueFactor, checkedAt: leases[0]?.checkedAt ?? CHECKED })

  test('healthy jobs: one OK line and exit 0; an empty table has nothing to check', () => {
    const healthy = verdict([lease('a'), lease('b')])
    assert.equal(renderCheck(healthy), `OK: 2 jobs healthy in ${TABLE} (database clock ${CHECKED})\n`)
    assert.equal(checkExitCode(healthy), 0)
    assert.equal(renderCheck(verdict([lease('a')])), `OK: 1 job healthy in ${TABLE} (database clock ${CHECKED})\n`)
    const none = verdict([])
    assert.equal(renderCheck(none), `OK: no jobs in ${TABLE} yet, nothing to check (database clock ${CHECKED})\n`)
    assert.equal(checkExitCode(none), 0)
  })

  test('one line per unhealthy job saying which and why; paused jobs are not overdue, but a failed run stays FAILING', () => {
    const result = verdict(SEVERAL)
    assert.equal(checkExitCode(result), 3)
    assert.deepEqual(renderCheck(result).split('\n'), [
      'import:nightly: OVERDUE: last claimed 3 h ago, every 1 h (grace 1 min)',
      'report:daily: FAILING: last run failed 5 min ago: Error: boom',
      'sync:failing-paused: FAILING: last run failed 5 min ago: TypeError: no such row; PAUSED until resumed, so it cannot run again until then',
      '',
    ])
    // sync:paused was claimed as long ago as import:nightly, with the same interval: only the pause keeps it healthy.
    assert.equal(renderCheck(result).includes('sync:paused'), false)
  })

  test('--job checks only the named jobs: a healthy one exits 0 whatever the others do; a job with no row is NEVER CLAIMED', () => {
    const healthy = verdict(SEVERAL, ['billing:hourly', 'sync:paused'])
    assert.equal(checkExitCode(healthy), 0)
    assert.match(renderCheck(healthy), /^OK: 2 jobs healthy in /)
    const missing = verdict(SEVERAL, ['billing:hourly', 'billing:hourlly'])
    assert.equal(checkExitCode(missing), 3)
    assert.equal(
      renderCheck(missing),
      `billing:hourlly: NEVER CLAIMED: no row in ${TABLE}: never claimed, or a typo in the name\n`,
    )
    const twice = verdict(SEVERAL, ['report:daily', 'report:daily'])
    assert.deepEqual(
      [checkExitCode(twice), renderCheck(twice).split('\n').length],
      [3, 2],
      'a job named twice is checked once',
    )
  })

  test('--json: { healthy, checkedAt, table, overdueFactor, jobs } with a verdict per job, and the same exit codes', () => {
    const result = verdict(SEVERAL, ['import:nightly', 'sync:failing-paused', 'billing:hourly', 'nope'])
    assert.equal(checkExitCode(result), 3)
    assert.deepEqual(JSON.parse(jsonText(result)), {
      healthy: false,
      checkedAt: CHECKED,
      table: TABLE,
      overdueFactor: 2,
      jobs: [
        {
          jobName: 'import:nightly',
          healthy: false,
          neverClaimed: false,
          overdue: true,
          failing: false,
          died: false,
          paused: false,
          reason: 'OVERDUE: last claimed 3 h ago, every 1 h (grace 1 min)',
        },
        {
          jobName: 'sync:failing-paused',
          healthy: false,
          neverClaimed: false,
          overdue: false,
          failing: true,
          died: false,
          paused: true,
          reason:
            'FAILING: last run failed 5 min ago: TypeError: no such row; PAUSED until resumed, so it cannot run again until then',
        },
        {
          jobName: 'billing:hourly',
          healthy: true,
          neverClaimed: false,
          overdue: false,
          failing: false,
          died: false,
          paused: false,
          reason: null,
        },
        {
          jobName: 'nope',
          healthy: false,
          neverClaimed: true,
          overdue: false,
          failing: false,
          died: false,
          paused: false,
          reason: `NEVER CLAIMED: no row in ${TABLE}: never claimed, or a typo in the name`,
        },
      ],
    })
    const ok = verdict(SEVERAL, ['billing:hourly'], 1.5)
    assert.equal(checkExitCode(ok), 0)
    assert.deepEqual([JSON.parse(jsonText(ok)).healthy, JSON.parse(jsonText(ok)).overdueFactor], [true, 1.5])
  })

  test('a job whose due time passed unclaimed is OVERDUE since that time, worded apart from the interval rule, and exits 3', () => {
    const result = verdict(OCCURRENCES)
    assert.equal(checkExitCode(result), 3)
    assert.deepEqual(renderCheck(result).split('\n'), [
      'due:late: OVERDUE: due 2026-11-30T11:55:30.000000Z, not claimed for 4 min (grace 1 min)',
      'due:unknown-interval: OVERDUE: due 2026-11-30T11:57:30.000000Z, not claimed for 2 min (grace 1 min)',
      '',
    ])
    assert.equal(
      checkExitCode(verdict(OCCURRENCES, ['due:ahead', 'due:grace', 'due:paused'])),
      0,
      'the others are healthy',
    )
    const both = renderCheck(verdict([...SEVERAL, ...OCCURRENCES]))
    assert.match(
      both,
      /^import:nightly: OVERDUE: last claimed 3 h ago, every 1 h \(grace 1 min\)$/m,
      'no due time: the interval rule',
    )
    assert.match(both, /^due:late: OVERDUE: due \S+, not claimed for 4 min/m)
  })

  test('the grace shown, in both wordings, is the --grace given, else (factor − 1) × the interval up to a minute, else a minute', () => {
    const late = (fields: Partial<LeaseInfo>) =>
      lease('j', { overdue: true, nextDueAt: at(-(4 * MIN + 30)), claimedAt: at(-HOUR), ...fields })
    const reason = (l: LeaseInfo, graceMs?: number, overdueFactor = 2) =>
      checkJobs({ leases: [l], jobs: [], table: TABLE, overdueFactor, graceMs, checkedAt: CHECKED }).jobs[0]!.reason
    const due = 'OVERDUE: due 2026-11-30T11:55:30.000000Z, not claimed for 4 min'
    assert.equal(reason(late({ everyMs: 30_000 })), `${due} (grace 30 s)`)
    assert.equal(reason(late({ everyMs: 3_600_000 })), `${due} (grace 1 min)`)
    assert.equal(reason(late({ everyMs: null })), `${due} (grace 1 min)`)
    assert.equal(reason(late({ everyMs: 30_000 }), 150_000), `${due} (grace 2 min 30 s)`)
    assert.equal(reason(late({ everyMs: 30_000 }), undefined, 3), `${due} (grace 1 min)`, 'factor 3: two intervals')
    assert.equal(
      reason(late({ everyMs: 3_600_000 }), undefined, 1.5),
      `${due} (grace 30 s)`,
      'factor 1.5: half a minute',
    )
    assert.equal(
      reason(late({ everyMs: 3_600_000 }), 150_000, 3),
      `${due} (grace 2 min 30 s)`,
      '--grace over the factor',
    )
    const interval = lease('j', { overdue: true, claimedAt: at(-3 * HOUR), everyMs: 3_600_000 })
    const claimed = 'OVERDUE: last claimed 3 h ago, every 1 h'
    assert.equal(reason(interval), `${claimed} (grace 1 min)`, 'no due time: the same grace')
    assert.equal(reason(interval, 150_000), `${claimed} (grace 2 min 30 s)`, 'no due time, --grace')
    assert.equal(reason(interval, undefined, 3), `${claimed} (grace 2 min)`, 'no due time, factor 3')
    assert.doesNotMatch(reason(interval, undefined, 3) ?? '', /factor/)
  })

  test('--json: a late job is overdue with the due-time reason', () => {
    const printed = JSON.parse(jsonText(verdict(OCCURRENCES, ['due:late'])))
    assert.deepEqual(Object.keys(printed), ['healthy', 'checkedAt', 'table', 'overdueFactor', 'jobs'])
    assert.deepEqual(printed.jobs, [
      {
        jobName: 'due:late',
        healthy: false,
        neverClaimed: false,
        overdue: true,
        failing: false,
        died: false,
        paused: false,
        reason: 'OVERDUE: due 2026-11-30T11:55:30.000000Z, not claimed for 4 min (grace 1 min)',
      },
    ])
  })

  test('a row of a table of the original shape is healthy: nothing is known to be wrong', () => {
    assert.equal(checkExitCode(verdict([OLD_SHAPE])), 0)
  })
})

describe('names and errors from the table are printed with their control characters escaped; JSON and Prometheus stay exact', () => {
  const NAME = 'evil\njob\x1b[2J\\'
  const HOLDER = 'host\r\x07'
  const SHOWN = 'evil\\njob\\x1b[2J\\\\'
  const EVIL = lease(NAME, {
    holder: HOLDER,
    claimedAt: at(-HOUR),
    leaseUntil: at(-59 * MIN),
    held: false,
    remainingMs: 0,
    lastOutcome: 'error',
    lastFinishedAt: at(-HOUR),
    lastDurationMs: 5,
    lastError: 'Error: \x1b]0;pwned\x07',
    everyMs: 1000,
    overdue: true,
  })

  test('status and check print one line per job, with \\n, \\x1b and a backslash escaped the same way', () => {
    const status = renderStatus([EVIL], TABLE, PLAIN)
    assert.ok(status.split('\n')[3]!.startsWith(`${SHOWN}   host\\r\\x07   `), status)
    assert.ok(status.includes(`  ${SHOWN}: Error: \\x1b]0;pwned\\x07\n`))
    const result = checkJobs({ leases: [EVIL], jobs: [], table: TABLE, overdueFactor: 2, checkedAt: CHECKED })
    const check = renderCheck(result)
    assert.equal(
      check,
      `${SHOWN}: OVERDUE: last claimed 1 h ago, every 1 s (grace 1 s); FAILING: last run failed 1 h ago: Error: \\x1b]0;pwned\\x07\n`,
    )
    for (const text of [status, check]) {
      assert.ok(!text.split('\n').some((l) => /\p{Cc}/u.test(l)), 'no raw control character reaches the terminal')
    }
    const json = JSON.parse(jsonText([EVIL]))
    assert.deepEqual([json[0].jobName, json[0].holder], [NAME, HOLDER])
    assert.equal(JSON.parse(jsonText(result)).jobs[0].jobName, NAME)
    const [held] = parseExposition(renderPrometheus([EVIL])).get('pg_cron_lease_held')!.samples
    assert.equal(held?.labels.job_name, NAME)
  })
})

describe("no output reads this machine's clock: ages are differences of database timestamps", () => {
  test('status, JSON, Prometheus and check print the same with the machine clock an hour ahead or a year behind', () => {
    const outputs = () => [
      renderStatus(SEVERAL, TABLE, PLAIN),
      jsonText(SEVERAL),
      renderPrometheus(SEVERAL),
      renderCheck(checkJobs({ leases: SEVERAL, jobs: [], table: TABLE, overdueFactor: 2, checkedAt: CHECKED })),
      renderStatus(OCCURRENCES, TABLE, PLAIN),
      renderPrometheus(OCCURRENCES),
      renderCheck(checkJobs({ leases: OCCURRENCES, jobs: [], table: TABLE, overdueFactor: 2, checkedAt: CHECKED })),
    ]
    const real = outputs()
    for (const skew of [3_600_000, -365 * 86_400_000]) {
      const now = Date.now()
      const restore = installSkew(skew)
      let skewed: string[]
      try {
        assert.ok(Math.abs(Date.now() - now - skew) < 60_000, 'the machine clock is skewed')
        skewed = outputs()
      } finally {
        restore()
      }
      assert.deepEqual(skewed, real, `skewed by ${skew} ms`)
    }
  })
})

describe('migrate says what it did', () => {
  const paint: Paint = PLAIN
  test('created, upgraded with the number of columns it added and the history it made, or up to date', () => {
    const where = '127.0.0.1:5432/app'
    const table = 'cron_leases'
    assert.equal(
      describeMigration({ table, where, before: null, after: 19, history: true }, paint),
      `Created table cron_leases and its run history cron_leases_runs in ${where}.\n`,
    )
    assert.equal(
      describeMigration({ table, where, before: 4, after: 19, history: true }, paint),
      `Upgraded table cron_leases in ${where}: added 15 columns for outcomes, pauses, occurrence keys and the history, and created its run history cron_leases_runs.\n`,
    )
    assert.equal(
      describeMigration({ table, where, before: 18, after: 19, history: true }, paint),
      `Upgraded table cron_leases in ${where}: added 1 column for outcomes, pauses, occurrence keys and the history, and created its run history cron_leases_runs.\n`,
    )
    assert.equal(
      describeMigration({ table, where, before: 19, after: 19, history: true }, paint),
      `Upgraded table cron_leases in ${where}: created its run history cron_leases_runs.\n`,
    )
    assert.equal(
      describeMigration({ table, where, before: 19, after: 19, history: false }, paint),
      `Table cron_leases already exists in ${where} and is up to date; nothing to do.\n`,
    )
    const green = painter({ isTTY: true }, {})
    assert.match(describeMigration({ table: 't', where, before: null, after: 19, history: true }, green), sgr('32'))
    assert.match(describeMigration({ table: 't', where, before: 4, after: 19, history: true }, green), sgr('32'))
    // Green marks a change made; a table already up to date had none.
    assert.doesNotMatch(describeMigration({ table: 't', where, before: 19, after: 19, history: false }, green), sgr())
  })
})

describe('invisible characters in names, holders and errors are shown as escapes, as the dashboard shows them', () => {
  // A zero-width space, a right-to-left override, a BOM, a word joiner, a tag (astral, Cf) and a line separator.
  const NAME = 'bill\u200Bing\u202Eevil\uFEFF\u2060\u{E0041}\u2028'
  const SHOWN = 'bill\\u200bing\\u202eevil\\ufeff\\u2060\\u{e0041}\\u2028'
  const invisible = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u

  test('escapeControls escapes every control, format, line and paragraph separator character, and leaves the rest', () => {
    assert.equal(escapeControls(NAME), SHOWN)
    assert.equal(escapeControls('billing é 日本 🙂'), 'billing é 日本 🙂')
    assert.equal(
      escapeControls('\u00AD\u061C\u200E\u200F\u202A\u2066\u2069'),
      '\\xad\\u061c\\u200e\\u200f\\u202a\\u2066\\u2069',
    )
  })

  test('status and history print bill\\u200Bing, never a name that looks like billing', () => {
    const status = renderStatus([lease(NAME, { holder: `web\u200D1` })], TABLE, PLAIN)
    assert.ok(status.includes(`${SHOWN}   web\\u200d1`), status)
    const run: RunInfo = {
      jobName: NAME,
      occurrence: null,
      holder: 'h\u202E',
      claimedAt: '2026-12-04T09:00:00.000000Z',
      startedAt: '2026-12-04T09:00:00.000000Z',
      finishedAt: '2026-12-04T09:00:01.000000Z',
      durationMs: 1000,
      outcome: 'error',
      error: 'Error: \u2066spoof\u2069',
      missed: 0,
      catchUp: false,
    }
    const history = renderHistory([run], TABLE, undefined, PLAIN)
    assert.ok(
      history.includes(SHOWN) && history.includes('h\\u202e') && history.includes('\\u2066spoof\\u2069'),
      history,
    )
    for (const text of [status, history]) {
      assert.ok(!text.split('\n').some((l) => invisible.test(l)), 'no invisible character reaches the terminal')
    }
  })
})
