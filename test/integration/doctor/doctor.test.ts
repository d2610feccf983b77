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
  test('a read-only role: privileges fails naming INSERT and UPDATE and suggests --no-race; the race is not run; exit 3; with --no-race it only warns, exit 0', async () => {
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
      // The advice holds: checked with --no-race, a role that may read is what a monitor needs.
      const noRace = await doctorCli(['--url', asReader.href, '--table', table, '--no-race'])
      assert.equal(noRace.code, 0, noRace.stdout)
      assert.deepEqual([...lines(noRace.stdout).keys()], IDS.slice(0, -1))
      assert.match(noRace.stdout, /\n9 checks: 8 passed, 1 warnings, 0 failures\n$/)
      const monitor = lines(noRace.stdout).get('privileges')!
      assert.equal(monitor.mark, '!')
      assert.match(monitor.text, /may read \(SELECT\) .*all that status, check and history need.*cannot claim/)
      assert.match(monitor.text, new RegExp(`GRANT INSERT, UPDATE ON "${table}" TO "${role}";`))
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

describe('SIGTERM cleans up as SIGINT does', () => {
  test('SIGTERM mid-race (timeout, a CI step limit, kubectl): it stops, deletes every row of its job in the table and its history, exits 1 saying so', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_sigterm'))
    const unchanged = await otherRow(table)
    const child = bin(['--url', url, '--table', table, '--rounds', '1000'])
    const done = finished(child, { killAfterMs: 60_000 })
    const deadline = performance.now() + 30_000
    while ((await doctorRows(admin, table, 'history')) === 0) {
      assert.ok(performance.now() < deadline && child.exitCode === null, 'the race started writing')
      await sleep(20)
    }
    child.kill('SIGTERM')
    const { code, signal, stdout, stderr } = await done
    assert.equal(signal, null, 'ended by its own handler, not by the signal')
    assert.equal(code, 1, stdout + stderr)
    assert.match(stderr, /^pg-cron-lease: interrupted: the race stopped, and its rows were deleted$/m)
    assert.equal(await doctorRows(admin, table), 0)
    await unchanged()
  })
})

describe('privileges: the schema, quoted names, and what a monitor needs', () => {
  test('a role without USAGE on the schema fails the privileges check (exit 3), and every GRANT it prints runs as printed, for a name that needs quotes', async () => {
    const schema = fresh('doctor_schema')
    await admin.query(`CREATE SCHEMA ${schema}`)
    const table = await leaseTableWithHistory(admin, `${schema}.leases`)
    const role = `Doctor-Reader-${randomBytes(3).toString('hex')}`
    const password = randomBytes(8).toString('hex')
    await admin.query(`CREATE ROLE "${role}" LOGIN PASSWORD '${password}'`)
    const as = new URL(url)
    as.username = role
    as.password = password
    /** Runs doctor as the role, then every GRANT of its privileges fix, exactly as printed. */
    const grantWhatItSays = async () => {
      const run = await doctorCli(['--url', as.href, '--table', table, '--format', 'json'])
      const privileges = (JSON.parse(run.stdout) as { id: string; status: string; fix: string | null }[]).find(
        (c) => c.id === 'privileges',
      )!
      for (const grant of (privileges.fix ?? '').match(/GRANT [^;]+;/g) ?? []) await admin.query(grant)
      return { run, privileges }
    }
    try {
      const first = await grantWhatItSays()
      assert.equal(first.run.code, 3, first.run.stdout + first.run.stderr)
      assert.equal(first.privileges.status, 'fail')
      assert.match(first.privileges.fix ?? '', new RegExp(`^GRANT USAGE ON SCHEMA "${schema}" TO "${role}";`))
      const second = await grantWhatItSays()
      assert.equal(second.privileges.status, 'fail')
      assert.match(
        second.privileges.fix ?? '',
        new RegExp(`GRANT SELECT, INSERT, UPDATE ON "${schema}"\\."leases" TO "${role}";`),
      )
      const third = await grantWhatItSays()
      assert.equal(third.privileges.status, 'pass', JSON.stringify(third.privileges))
      assert.equal(third.run.code, 0, third.run.stdout)
    } finally {
      await admin.query(`DROP OWNED BY "${role}"`)
      await admin.query(`DROP ROLE "${role}"`)
    }
  })
})

/** A transaction on its own client holding `mode` on `table`, until `release()`. */
async function lockTable(table: string, mode: string) {
  const locker = await admin.connect()
  await locker.query('BEGIN')
  await locker.query(`LOCK TABLE ${quoteTable(table)} IN ${mode} MODE`)
  const pid = (await locker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number
  return {
    pid,
    async release() {
      await locker.query('COMMIT')
      locker.release()
    },
  }
}

describe('a locked table: every check ends in bounded time, naming the lock', () => {
  test('a table held in SHARE mode (a plain CREATE INDEX): the race fails within seconds naming the lock and its holder; exit 3; nothing left', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_locked'))
    const lock = await lockTable(table, 'SHARE')
    try {
      const run = await doctorCli(['--url', url, '--table', table, '--rounds', '5'])
      assert.equal(run.code, 3, run.stdout + run.stderr)
      const race = lines(run.stdout).get('race')!
      assert.equal(race.mark, '✗')
      assert.match(
        race.text,
        new RegExp(
          `ran past lock_timeout \\(SQLSTATE 55P03\\), waiting for the lock on ${table} held by pid ${lock.pid} \\(ShareLock`,
        ),
      )
      assert.ok(run.ms < 15_000, `took ${Math.round(run.ms)} ms`)
    } finally {
      await lock.release()
    }
    assert.equal(await doctorRows(admin, table), 0)
  })

  test('Ctrl-C while a claim waits on the lock ends the doctor within a few seconds', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_locked_int'))
    const lock = await lockTable(table, 'SHARE')
    try {
      const child = bin(['--url', url, '--table', table])
      const done = finished(child, { killAfterMs: 60_000 })
      let err = ''
      child.stderr.on('data', (chunk) => (err += chunk))
      const deadline = performance.now() + 30_000
      while (!err.includes('racing')) {
        assert.ok(performance.now() < deadline && child.exitCode === null, `the race started: ${err}`)
        await sleep(20)
      }
      const sent = performance.now()
      child.kill('SIGINT')
      const { code, stderr } = await done
      const took = performance.now() - sent
      assert.equal(code, 1, stderr)
      assert.match(stderr, /interrupted/)
      assert.ok(took < 5000, `ended ${Math.round(took)} ms after SIGINT`)
    } finally {
      await lock.release()
    }
    assert.equal(await doctorRows(admin, table), 0)
  })

  test('a statement_timeout that cuts a claim (57014) is named as such, with the lock it waited for; not a failed connection', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_stmt_timeout'))
    const lock = await lockTable(table, 'ACCESS EXCLUSIVE')
    try {
      const session = new URL(url)
      session.searchParams.set('options', '-c statement_timeout=300')
      const run = await doctorCli(['--url', session.href, '--table', table, '--rounds', '3'])
      assert.equal(run.code, 3, run.stdout + run.stderr)
      assert.doesNotMatch(run.stdout + run.stderr, /cannot connect/)
      assert.match(
        lines(run.stdout).get('race')!.text,
        new RegExp(
          `ran past statement_timeout \\(SQLSTATE 57014\\), waiting for the lock on ${table} held by pid ${lock.pid} \\(AccessExclusiveLock`,
        ),
      )
    } finally {
      await lock.release()
    }
  })
})

describe('runDoctor on a pg Pool: it settles, and a lost connection does not crash the process', () => {
  test('a Pool of max 1 settles: the pooler check uses its one connection, and the race says why it did not run', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_max1'))
    const pool = await testPool({ max: 1 })
    try {
      const checks = await Promise.race([
        runDoctor(pool, { table }),
        sleep(20_000).then(() => assert.fail('runDoctor on a Pool of max 1 did not settle within 20 s')),
      ])
      const race = checks.find((c) => c.id === 'race')!
      assert.equal(race.status, 'warn')
      assert.match(race.summary, /^not run: this pool lends one connection \(max: 1\)/)
      assert.match(checks.find((c) => c.id === 'pooler')!.detail, /one connection only/)
    } finally {
      await pool.end()
    }
  })

  test('a race connection terminated by the server: the race fails with the error, the process lives, and its rows are deleted', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_dropped'))
    const name = fresh('doctor_dropped')
    const pool = await testPool({ max: 12, application_name: name })
    let watching = true
    const killed = (async () => {
      while (watching && (await doctorRows(admin, table)) === 0) await sleep(10)
      if (!watching) return 0
      const { rows } = await admin.query(
        'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1',
        [name],
      )
      return rows[0].n as number
    })()
    try {
      const checks = await runDoctor(pool, { table, rounds: 1000 })
      watching = false
      assert.ok((await killed) > 0, 'connections were terminated mid-race')
      const race = checks.find((c) => c.id === 'race')!
      assert.equal(race.status, 'fail')
      assert.match(race.summary, /^the race could not run: /)
      assert.equal(await doctorRows(admin, table), 0)
    } finally {
      watching = false
      await killed
      await pool.end()
    }
  })
})

/**
 * A handle over a real pool client whose claims answer as `policy` says for their round: `won`
 * (every claim reads as won, the real result aside), `lost` (every claim reads as lost), or the
 * real answer. The probe always reads "not held", so each claimant sends one claim per round.
 */
function rigged(pool: pg.Pool, n: number, policy: (round: number) => 'won' | 'lost' | 'real') {
  let claims = 0
  return async () => {
    const client = await pool.connect()
    return {
      async query(text: unknown, params?: unknown[]) {
        const sql = typeof text === 'string' ? text : (text as { text: string }).text
        const result = await client.query(sql, params as unknown[])
        if (sql.startsWith('SELECT true AS held')) return { rowCount: 0, rows: [] }
        if (!sql.includes('ON CONFLICT (job_name)')) return result
        const answer = policy(Math.floor(claims++ / n) + 1)
        if (answer === 'lost') return { rowCount: 0, rows: [] }
        if (answer === 'won' && result.rowCount === 0) {
          return { rowCount: 1, rows: [{ claimed_at: new Date().toISOString().replace('Z', '000Z'), missed: 0 }] }
        }
        return result
      },
      release: () => client.release(),
    }
  }
}

describe('the race verdict, on a stack that breaks the guarantee', () => {
  test('rounds with two winners and rounds with none fail the race, each named by its number', async () => {
    const table = await leaseTableWithHistory(admin, fresh('doctor_rigged'))
    const pool = await testPool({ max: 12 })
    try {
      const policy = (round: number) => (round === 2 || round === 5 ? 'won' : round === 4 ? 'lost' : 'real')
      const checks = await runDoctor(pool, { table, race: 3, rounds: 6, connect: rigged(pool, 3, policy) })
      const race = checks.find((c) => c.id === 'race')!
      assert.equal(race.status, 'fail', JSON.stringify(race))
      assert.match(
        race.summary,
        /^3 of 6 rounds did not have exactly one winner \(2 with more, 1 with none: more than one winner in rounds 2, 5; no winner in round 4\): the guarantee does not hold/,
      )
      assert.match(
        race.detail,
        /3 with one winner, 1 with none, 2 with more \(more than one winner in rounds 2, 5; no winner in round 4\)/,
      )
      const everyone = await runDoctor(pool, { table, race: 2, rounds: 3, connect: rigged(pool, 2, () => 'won') })
      assert.match(
        everyone.find((c) => c.id === 'race')!.summary,
        /^3 of 3 rounds .*\(3 with more, 0 with none: more than one winner in rounds 1, 2, 3\)/,
      )
      const nobody = await runDoctor(pool, { table, race: 2, rounds: 2, connect: rigged(pool, 2, () => 'lost') })
      assert.match(
        nobody.find((c) => c.id === 'race')!.summary,
        /^2 of 2 rounds .*\(0 with more, 2 with none: no winner in rounds 1, 2\)/,
      )
      assert.equal(await doctorRows(admin, table), 0)
    } finally {
      await pool.end()
    }
  })
})
