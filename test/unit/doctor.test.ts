/**
 * The doctor's verdicts, as pure functions of what it read: the cases no test server here can
 * have (a Postgres older than 14, a clock far behind), every fix's link resolving to a heading of
 * the docs, the text lines and the summary. Each fault on a real server is in
 * test/integration/doctor/.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import { doctorExitCode, renderDoctor } from '../../src/cli/doctor.ts'
import {
  DOCTOR_CHECKS,
  type DoctorCheck,
  judgeClock,
  judgeConnection,
  judgeDurability,
  judgePooler,
  judgePrepared,
  judgePrivileges,
  judgeRace,
  judgeSchemaUsage,
  judgeTable,
  judgeTimeouts,
  judgeWritable,
} from '../../src/doctor.ts'
import { painter } from '../../src/human.ts'
import { runDoctor } from '../../src/index.ts'
import { standIn } from '../helpers/stand-in.ts'

const server = {
  version_num: 180004,
  version: '18.4',
  role: 'app',
  in_recovery: false,
  read_only: 'off',
  synchronous_commit: 'on',
  synchronous_standby_names: '',
  standbys: 0,
  statement_timeout: '0',
  lock_timeout: '0',
  idle_in_transaction_session_timeout: '0',
}
const current = { exists: true, columns: 19, current: true, history: true, history_table: true, history_shape: true }
const all = ['SELECT', 'INSERT', 'UPDATE', 'DELETE']
const grants = (kind: string, granted: string[]) =>
  all.map((privilege) => ({ kind, privilege, granted: granted.includes(privilege) }))

describe('each verdict, from what was read', () => {
  test('Postgres 14 and later pass; 13 fails and says to upgrade', () => {
    assert.equal(judgeConnection({ ...server, version_num: 140000, version: '14.0' }).status, 'pass')
    const old = judgeConnection({ ...server, version_num: 130012, version: '13.12' })
    assert.equal(old.status, 'fail')
    assert.match(old.summary, /PostgreSQL 13\.12 is older than 14/)
    assert.match(old.fix ?? '', /Postgres 14 or later/)
  })

  test('a standby and a read-only session fail; a primary passes', () => {
    assert.equal(judgeWritable(server).status, 'pass')
    assert.match(judgeWritable({ ...server, in_recovery: true }).summary, /standby/)
    assert.equal(judgeWritable({ ...server, read_only: 'on' }).status, 'fail')
  })

  test('the table: missing and the original shape fail naming migrate; no history table warns', () => {
    const missing = judgeTable('jobs.t', 'jobs.t_runs', { exists: false })
    assert.equal(missing.status, 'fail')
    assert.match(missing.fix ?? '', /pg-cron-lease migrate --table jobs\.t/)
    const original = judgeTable('cron_leases', 'cron_leases_runs', { exists: true, columns: 4, current: false })
    assert.equal(original.status, 'fail')
    assert.match(original.summary, /original 4-column shape/)
    assert.match(original.fix ?? '', /`pg-cron-lease migrate`/)
    const noHistory = judgeTable('cron_leases', 'cron_leases_runs', {
      ...current,
      history: false,
      history_table: false,
      history_shape: false,
    })
    assert.equal(noHistory.status, 'warn')
    assert.match(noHistory.summary, /cron_leases_runs is missing/)
    assert.match(noHistory.fix ?? '', /pg-cron-lease migrate/)
    const unused = judgeTable('cron_leases', 'cron_leases_runs', { ...current, history: false, history_shape: false })
    assert.equal(unused.status, 'warn')
    assert.match(unused.summary, /lacks the column its history table cron_leases_runs needs/)
    assert.equal(judgeTable('cron_leases', 'cron_leases_runs', current).status, 'pass')
  })

  test('privileges: each missing one named, per table; the history needs DELETE, the lease table not', () => {
    const fine = judgePrivileges('t', 't_runs', 'app', [...grants('lease', all.slice(0, 3)), ...grants('history', all)])
    assert.equal(fine.verdict.status, 'pass')
    assert.equal(fine.canDelete, false)
    const reader = judgePrivileges('t', 't_runs', 'monitor', grants('lease', ['SELECT']))
    assert.equal(reader.verdict.status, 'fail')
    assert.match(reader.verdict.summary, /monitor lacks INSERT, UPDATE on t\b/)
    assert.match(reader.verdict.fix ?? '', /GRANT INSERT, UPDATE ON "t" TO "monitor";.*--no-race/)
    const history = judgePrivileges('t', 't_runs', 'app', [...grants('lease', all), ...grants('history', ['SELECT'])])
    assert.match(history.verdict.summary, /INSERT, UPDATE, DELETE on t_runs/)
  })

  test('privileges: every GRANT quotes its names; a role that may only read passes --no-race with a warning, one without SELECT fails it', () => {
    const odd = judgePrivileges('jobs.Leases', 'jobs.Leases_runs', 'App-User', grants('lease', ['SELECT']))
    assert.match(odd.verdict.fix ?? '', /^GRANT INSERT, UPDATE ON "jobs"\."Leases" TO "App-User";/)
    const monitor = judgePrivileges(
      't',
      't_runs',
      'monitor',
      [...grants('lease', ['SELECT']), ...grants('history', ['SELECT'])],
      true,
    )
    assert.equal(monitor.verdict.status, 'warn')
    assert.match(
      monitor.verdict.summary,
      /^monitor may read \(SELECT\) t and t_runs, .* lacks INSERT, UPDATE on t; INSERT, UPDATE, DELETE on t_runs: it cannot claim$/,
    )
    const blind = judgePrivileges(
      't',
      't_runs',
      'monitor',
      [...grants('lease', []), ...grants('history', ['SELECT'])],
      true,
    )
    assert.equal(blind.verdict.status, 'fail')
    assert.match(blind.verdict.fix ?? '', /^GRANT SELECT ON "t" TO "monitor"; A role meant only to read/)
    const usage = judgeSchemaUsage('jobs.t', 'jobs', 'Mon"itor')
    assert.equal(usage.status, 'fail')
    assert.match(usage.fix ?? '', /^GRANT USAGE ON SCHEMA "jobs" TO "Mon""itor";/)
  })

  test('the race names the rounds that had no winner or more than one', () => {
    const failed = judgeRace({ n: 3, rounds: 20, lostP50: 0.3, selectP50: 0.15, failed: { none: [7], many: [2, 11] } })
    assert.equal(failed.status, 'fail')
    assert.match(
      failed.summary,
      /^3 of 20 rounds did not have exactly one winner \(2 with more, 1 with none: more than one winner in rounds 2, 11; no winner in round 7\)/,
    )
    assert.match(failed.detail, /\(more than one winner in rounds 2, 11; no winner in round 7\)/)
  })

  test('the clock: within the tolerance (less the round trip doubt) passes; ahead or behind past it warns, saying what it affects', () => {
    assert.equal(judgeClock(5400, 1000, 5000).status, 'pass', '5.4 s off ± 501 ms is within 5 s')
    const ahead = judgeClock(600_000, 2, 5000)
    assert.equal(ahead.status, 'warn')
    assert.match(ahead.summary, /600000 ms ahead of the database's.*"too early"/)
    const behind = judgeClock(-600_000, 2, 5000)
    assert.match(behind.summary, /600000 ms behind.*fire late/)
    assert.match(behind.fix ?? '', /NTP/)
  })

  test('the pooler warns on a second backend, a backend shared, or session state lost', () => {
    const alone = { pids: [7], shared: [], markLost: false, waited: false, two: true }
    assert.equal(judgePooler(alone).status, 'pass')
    assert.match(judgePooler({ ...alone, pids: [7, 8] }).summary, /reached 2 backends/)
    assert.match(judgePooler({ ...alone, shared: [7] }).summary, /shared a backend with another connection/)
    assert.match(judgePooler({ ...alone, markLost: true }).summary, /lost its session state/)
    assert.match(judgePooler({ ...alone, waited: true }).summary, /waited for another connection's transaction/)
    assert.equal(judgePrepared(true, true).status, 'warn')
    assert.equal(judgePrepared(true, false).status, 'pass')
    assert.equal(judgePrepared(false, false).status, 'pass')
  })

  test('durability: synchronous_commit off warns; so do streaming standbys none of which is synchronous', () => {
    assert.equal(judgeDurability(server).status, 'pass')
    assert.equal(judgeDurability({ ...server, synchronous_commit: 'off' }).status, 'warn')
    assert.match(judgeDurability({ ...server, standbys: 1 }).fix ?? '', /docs\/high-availability\.md/)
    assert.equal(judgeDurability({ ...server, standbys: 1, synchronous_standby_names: 's1' }).status, 'pass')
    assert.equal(
      judgeDurability({ ...server, standbys: 1, synchronous_standby_names: 's1', synchronous_commit: 'local' }).status,
      'warn',
    )
  })

  test('timeouts warn with their values', () => {
    assert.equal(judgeTimeouts(server).status, 'pass')
    const cut = judgeTimeouts({ ...server, statement_timeout: '2s', idle_in_transaction_session_timeout: '1min' })
    assert.equal(cut.status, 'warn')
    assert.match(cut.summary, /statement_timeout = 2s, idle_in_transaction_session_timeout = 1min/)
  })

  test('the race fails unless every round had exactly one winner, and reports the losing claim against SELECT 1', () => {
    const r = { n: 10, rounds: 20, lostP50: 0.3, selectP50: 0.15, failed: { none: [], many: [] } }
    const ok = judgeRace(r)
    assert.equal(ok.status, 'pass')
    assert.match(ok.summary, /losing claim's p50 0\.30 ms, 2\.0× SELECT 1's 0\.15 ms/)
    assert.equal(judgeRace({ ...r, failed: { none: [], many: [4] } }).status, 'fail')
    assert.equal(judgeRace({ ...r, failed: { none: [4], many: [] } }).status, 'fail')
  })
})

/** GitHub's heading anchor, as test/tooling/docs.test.ts computes it. */
const slug = (heading: string) =>
  heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\p{Pc} -]/gu, '')
    .replace(/ /g, '-')

test('every fix links to a heading that exists in docs/', () => {
  const fixes = [
    judgeConnection({ ...server, version_num: 130000 }),
    judgeWritable({ ...server, in_recovery: true }),
    judgeWritable({ ...server, read_only: 'on' }),
    judgeTable('t', 't_runs', { exists: false }),
    judgeTable('t', 't_runs', { exists: true, columns: 4, current: false }),
    judgeTable('t', 't_runs', { ...current, history: false, history_table: false, history_shape: false }),
    judgePrivileges('t', 't_runs', 'app', []).verdict,
    judgePrivileges('t', 't_runs', 'app', grants('lease', [])).verdict,
    judgePrivileges('t', 't_runs', 'app', grants('lease', ['SELECT']), true).verdict,
    judgePrivileges('t', 't_runs', 'app', grants('lease', []), true).verdict,
    judgeSchemaUsage('s.t', 's', 'app'),
    judgeClock(600_000, 1, 5000),
    judgePooler({ pids: [1, 2], shared: [], markLost: true, waited: false, two: true }),
    judgePrepared(true, true),
    judgeDurability({ ...server, synchronous_commit: 'off' }),
    judgeDurability({ ...server, standbys: 2 }),
    judgeTimeouts({ ...server, lock_timeout: '1s' }),
    judgeRace({ n: 2, rounds: 1, lostP50: 1, selectP50: 1, failed: { none: [1], many: [] } }),
  ].map((v) => v.fix ?? '')
  for (const fix of fixes) {
    const link = /\((docs\/[\w-]+\.md)#([^)\s]+)\)$/.exec(fix)
    assert.ok(link, `the fix ends with a link into docs/: ${fix}`)
    const headings = readFileSync(new URL(`../../${link[1]}`, import.meta.url), 'utf8')
      .split('\n')
      .flatMap((line) => /^#{1,6}\s+(.*?)\s*#*$/.exec(line)?.[1] ?? [])
      .map(slug)
    assert.ok(headings.includes(link[2]!), `${link[1]} has a heading #${link[2]}`)
  }
})

describe('the text and the exit code', () => {
  const checks: DoctorCheck[] = [
    { id: 'connection', status: 'pass', summary: 'PostgreSQL 18.4', detail: '', fix: null },
    { id: 'pooler', status: 'warn', summary: 'transaction pooling', detail: '', fix: 'see (docs/drivers.md#pg)' },
    { id: 'race', status: 'fail', summary: 'two winners\nin one round', detail: '', fix: 'report it' },
  ]
  const plain = painter({ isTTY: false }, {})

  test('one line per check, its mark, id and summary, the fix after ! and ✗; then the counts', () => {
    assert.equal(
      renderDoctor(checks, plain),
      '✓ connection: PostgreSQL 18.4\n' +
        '! pooler: transaction pooling; fix: see (docs/drivers.md#pg)\n' +
        '✗ race: two winners\\nin one round; fix: report it\n' +
        '3 checks: 1 passed, 1 warnings, 1 failures\n',
    )
  })

  test('exit 3 with any failure, 0 with warnings only', () => {
    assert.equal(doctorExitCode(checks), 3)
    assert.equal(doctorExitCode(checks.slice(0, 2)), 0)
  })

  test('the ids are the ten the issue names, in its order', () => {
    assert.deepEqual(DOCTOR_CHECKS, [
      'connection',
      'writable',
      'table',
      'privileges',
      'clock',
      'pooler',
      'prepared',
      'durability',
      'timeouts',
      'race',
    ])
  })
})

describe('runDoctor checks its arguments before any query', () => {
  test('a bad option is a TypeError naming it, and nothing is sent', async () => {
    const cases: [unknown, RegExp][] = [
      [{ race: 1 }, /opts\.race must be a whole number from 2 to 100, got 1/],
      [{ race: true }, /opts\.race must be a whole number/],
      [{ rounds: 0 }, /opts\.rounds must be a whole number from 1 to 1000, got 0/],
      [{ signal: {} }, /opts\.signal must be an AbortSignal/],
      [{ connect: 'pg' }, /opts\.connect must be a function/],
      [{ onProgress: 1 }, /opts\.onProgress must be a function/],
      [{ table: 'a b' }, /opts\.table must be/],
      [
        { holder: 'x' },
        /opts\.holder must be one of the known options \(table, clockToleranceMs, race, rounds, connect, signal, onProgress\)/,
      ],
    ]
    for (const [opts, message] of cases) {
      const db = standIn()
      await assert.rejects(runDoctor(db, opts as never), { name: 'TypeError', message })
      assert.equal(db.calls.length, 0)
    }
    await assert.rejects(runDoctor({} as never), { name: 'TypeError', message: /db must be an object with a query/ })
  })
})
