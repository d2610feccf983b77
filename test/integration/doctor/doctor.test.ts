/**
 * `pg-cron-lease doctor` and runDoctor against the test server (Postgres 18, or 14 under
 * `npm run test:pg14`), each fault made real on it: a read-only role, the original 4-column
 * table, synchronous_commit off and a statement timeout for the session, a host clock 10 minutes
 * off (a child process with a shifted Date), and the race interrupted. PgBouncer and a hot
 * standby are in stacks.test.ts beside this file.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { historyTableOf, quoteTable, runDoctor } from '../../../src/index.ts'
import { finished } from '../../helpers/child.ts'
import { doctorCli, doctorRows, leaseTableWithHistory, lines } from '../../helpers/doctor.ts'

const ROOT = fileURLToPath(new URL('../../..', import.meta.url))
const IDS = [
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
]

let url: string
let admin: pg.Pool

before(async () => {
  url = await testDatabaseUrl()
  admin = await testPool({ max: 4 })
})

after(async () => {
  await admin?.end()
})

const fresh = (prefix: string) => `${prefix}_${randomBytes(5).toString('hex')}`

/** A row of another job, compared whole before and after: the doctor touches no other row. */
async function otherRow(table: string): Promise<() => Promise<void>> {
  await admin.query(
    `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder) VALUES ('billing:hourly', clock_timestamp() - interval '1 hour', 'replica-1')`,
  )
  const read = async () =>
    (await admin.query(`SELECT * FROM ${quoteTable(table)} WHERE job_name = 'billing:hourly'`)).rows
  const before = await read()
  return async () => assert.deepEqual(await read(), before, 'the row of another job is unchanged')
}

/** The pg-cron-lease bin from source, in a child process, with `env` added. */
function bin(args: string[], env: Record<string, string> = {}, preload: string[] = []) {
  const imports = ['tsx', ...preload].flatMap((m) => ['--import', m])
  return spawn(process.execPath, [...imports, 'src/cli.ts', 'doctor', ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
}

describe('a healthy server: every check passes, exit 0', () => {
  test('ten lines of ✓, the summary, what it did on stderr, in under 10 s; no row of its job is left, no other row touched', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_healthy'))
    const unchanged = await otherRow(table)
    const run = await doctorCli(['--url', url, '--table', table])
    assert.equal(run.code, 0, run.stdout + run.stderr)
    const found = lines(run.stdout)
    assert.deepEqual([...found.keys()], IDS)
    for (const [id, { mark, text }] of found) assert.equal(mark, '✓', `${id}: ${text}`)
    assert.match(run.stdout, /\n10 checks: 10 passed, 0 warnings, 0 failures\n$/)
    assert.match(
      found.get('race')!.text,
      /^20 rounds of 10 connections, exactly one winner each; a losing claim's p50 [\d.]+ ms, [\d.]+× SELECT 1's [\d.]+ ms$/,
    )
    assert.match(found.get('connection')!.text, /^PostgreSQL 1[48]\.\d+, supported/)
    assert.match(run.stderr, /^pg-cron-lease doctor: racing 10 connections for 20 rounds/m)
    assert.ok(run.ms < 10_000, `took ${Math.round(run.ms)} ms`)
    assert.equal(await doctorRows(admin, table), 0)
    await unchanged()
  })

  test('--format json parses: one { id, status, summary, detail, fix } per check, every id in the docs; nothing on stderr', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_json'))
    const run = await doctorCli(['--url', url, '--table', table, '--format', 'json', '--race', '3', '--rounds', '5'])
    assert.equal(run.code, 0)
    assert.equal(run.stderr, '')
    const checks = JSON.parse(run.stdout) as Record<string, unknown>[]
    assert.deepEqual(
      checks.map((c) => c.id),
      IDS,
    )
    const operations = readFileSync(new URL('../../../docs/operations.md', import.meta.url), 'utf8')
    const doctor = operations.slice(operations.indexOf('\n## Doctor'))
    for (const check of checks) {
      assert.deepEqual(Object.keys(check), ['id', 'status', 'summary', 'detail', 'fix'])
      assert.equal(check.status, 'pass', JSON.stringify(check))
      assert.equal(check.fix, null)
      assert.equal(typeof check.summary, 'string')
      assert.equal(typeof check.detail, 'string')
      assert.ok(doctor.includes(`\`${check.id}\``), `docs/operations.md#doctor documents ${check.id}`)
    }
    assert.match(String(checks[9]!.summary), /^5 rounds of 3 connections/)
  })

  test('runDoctor on a pg Pool: the same checks, its clients racing; --no-race leaves the race out', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_pool'))
    const pool = await testPool({ max: 12 })
    try {
      const steps: string[] = []
      const checks = await runDoctor(pool, { table, onProgress: (m) => steps.push(m) })
      assert.deepEqual(
        checks.map((c) => [c.id, c.status]),
        IDS.map((id) => [id, 'pass']),
      )
      assert.ok(steps.length >= 5, steps.join('; '))
      const quiet = await runDoctor(pool, { table, race: false })
      assert.deepEqual(
        quiet.map((c) => c.id),
        IDS.slice(0, -1),
      )
      assert.equal(await doctorRows(admin, table), 0)
    } finally {
      await pool.end()
    }
  })

  test('a client inside a transaction is refused before any statement, and its transaction goes on', async () => {
    const client = await admin.connect()
    try {
      await client.query('BEGIN')
      await assert.rejects(runDoctor(client), {
        name: 'TypeError',
        message: /db must be a Pool or a client outside a transaction/,
      })
      assert.equal(client.getTransactionStatus(), 'T')
      assert.deepEqual((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }])
    } finally {
      await client.query('ROLLBACK')
      client.release()
    }
  })

  test('a Pool of max 4 races with its 4 clients, rather than wait for clients it cannot lend', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_small_pool'))
    const pool = await testPool({ max: 4 })
    try {
      const race = (await runDoctor(pool, { table, rounds: 5 })).find((c) => c.id === 'race')!
      assert.equal(race.status, 'pass')
      assert.match(race.summary, /^5 rounds of 4 connections, exactly one winner each/)
    } finally {
      await pool.end()
    }
  })
})

describe('each fault, on a server that has it', () => {
  test('a read-only role: privileges fails naming INSERT and UPDATE and suggests --no-race; the race is not run; exit 3', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_reader'))
    const role = fresh('doctor_reader')
    const password = randomBytes(8).toString('hex')
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`)
    try {
      await admin.query(`GRANT SELECT ON ${quoteTable(table)}, ${quoteTable(historyTableOf(table))} TO ${role}`)
      const asReader = new URL(url)
      asReader.username = role
      asReader.password = password
      const run = await doctorCli(['--url', asReader.href, '--table', table])
      assert.equal(run.code, 3, run.stdout + run.stderr)
      const found = lines(run.stdout)
      const privileges = found.get('privileges')!
      assert.equal(privileges.mark, '✗')
      assert.match(
        privileges.text,
        new RegExp(`${role} lacks INSERT, UPDATE on ${table}; INSERT, UPDATE, DELETE on ${table}_runs`),
      )
      assert.match(privileges.text, /--no-race/)
      assert.equal(found.get('race')!.mark, '✗')
      assert.match(found.get('race')!.text, /^not run: the privileges check failed/)
      assert.equal(found.get('writable')!.mark, '✓')
      const noRace = await doctorCli(['--url', asReader.href, '--table', table, '--no-race'])
      assert.equal(noRace.code, 3)
      assert.deepEqual([...lines(noRace.stdout).keys()], IDS.slice(0, -1))
      assert.match(noRace.stdout, /\n9 checks: 8 passed, 0 warnings, 1 failures\n$/)
    } finally {
      await admin.query(`DROP OWNED BY ${role}`)
      await admin.query(`DROP ROLE ${role}`)
    }
  })

  test('the original 4-column table: the table check fails and names migrate; exit 3', async () => {
    const table = fresh('doctor_original')
    await admin.query(`CREATE TABLE ${table} (
      job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL, holder TEXT,
      claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`)
    const run = await doctorCli(['--url', url, '--table', table])
    assert.equal(run.code, 3, run.stdout)
    const check = lines(run.stdout).get('table')!
    assert.equal(check.mark, '✗')
    assert.match(check.text, /has the original 4-column shape/)
    assert.match(check.text, new RegExp(`run \`pg-cron-lease migrate --table ${table}\``))
    assert.equal(await doctorRows(admin, table), 0)
  })

  test('synchronous_commit = off and a statement_timeout for the session: durability and timeouts warn with the values; exit 0', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_async'))
    const session = new URL(url)
    session.searchParams.set('options', '-c synchronous_commit=off -c statement_timeout=5s')
    const run = await doctorCli(['--url', session.href, '--table', table])
    assert.equal(run.code, 0, run.stdout)
    const found = lines(run.stdout)
    assert.equal(found.get('durability')!.mark, '!')
    assert.match(
      found.get('durability')!.text,
      /synchronous_commit is off: .*run twice; fix: .*docs\/high-availability\.md#/,
    )
    assert.equal(found.get('timeouts')!.mark, '!')
    assert.match(found.get('timeouts')!.text, /statement_timeout = 5s/)
    assert.equal(found.get('race')!.mark, '✓')
    assert.match(run.stdout, /\n10 checks: 8 passed, 2 warnings, 0 failures\n$/)
  })

  test('a host clock 10 minutes ahead (a child process with a shifted Date): the clock warns, naming "too early"; exit 0', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_skew'))
    const child = bin(['--url', url, '--table', table], { SKEW_MS: '600000' }, ['./dev/skew-clock.ts'])
    const { code, stdout, stderr } = await finished(child, { killAfterMs: 60_000 })
    assert.equal(code, 0, stdout + stderr)
    const clock = lines(stdout).get('clock')!
    assert.equal(clock.mark, '!')
    assert.match(clock.text, /this host's clock is (599|600)\d{3} ms ahead of the database's .*"too early".*NTP/)
    assert.equal(lines(stdout).get('race')!.mark, '✓', 'the lease alone decides, whatever the host clock')
  })
})

describe('the race leaves no row behind', () => {
  test('SIGINT mid-race: it stops, deletes every row of its job in the table and its history, exits 1 saying so; no other row touched', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_sigint'))
    const unchanged = await otherRow(table)
    const child = bin(['--url', url, '--table', table, '--rounds', '1000'])
    const done = finished(child, { killAfterMs: 60_000 })
    // Interrupted once its job has runs in the history, so there is something to clean up in both tables.
    const deadline = performance.now() + 30_000
    while ((await doctorRows(admin, table, 'history')) === 0) {
      assert.ok(performance.now() < deadline && child.exitCode === null, 'the race started writing')
      await sleep(20)
    }
    child.kill('SIGINT')
    const { code, stdout, stderr } = await done
    assert.equal(code, 1, stdout + stderr)
    assert.equal(stdout, '')
    assert.match(stderr, /^pg-cron-lease: interrupted: the race stopped, and its rows were deleted$/m)
    assert.equal(await doctorRows(admin, table), 0)
    await unchanged()
  })

  test('runDoctor aborted by its signal mid-race rejects with the reason, after deleting its rows', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_abort'))
    const pool = await testPool({ max: 12 })
    const stop = new AbortController()
    try {
      const reason = new Error('stopped by the test')
      // One look at a time, awaited before the test ends: an interval's callbacks pile up on a loaded
      // machine, and one still querying when the file ends its pool rejects unhandled.
      let watching = true
      const watcher = (async () => {
        while (watching && !stop.signal.aborted) {
          if ((await doctorRows(admin, table)) > 0) stop.abort(reason)
          else await new Promise((resolve) => setTimeout(resolve, 10))
        }
      })()
      await assert.rejects(runDoctor(pool, { table, rounds: 1000, signal: stop.signal }), (e) => e === reason)
      watching = false
      await watcher
      assert.equal(stop.signal.aborted, true)
      assert.equal(await doctorRows(admin, table), 0)
    } finally {
      await pool.end()
    }
  })
})
