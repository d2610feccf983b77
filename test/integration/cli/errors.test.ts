/**
 * The pg-cron-lease bin against databases it cannot use: each error is one line that says what to
 * do, with exit 1, and a password given is never printed; the pg driver is an optional peer; and a
 * closed stdout is not an error. The bin is built as the package ships it (test/helpers/cli-bin.ts).
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import net from 'node:net'
import path from 'node:path'
import { before, describe, test } from 'node:test'
import type pg from 'pg'
import { freePort, freshTable } from '../../../dev/postgres.ts'
import { createTableSql, withCronLease } from '../../../src/index.ts'
import { finished } from '../../helpers/child.ts'
import { assertFails, BIN_PATH, useBuiltBin } from '../../helpers/cli-bin.ts'

const { ready, cli } = useBuiltBin()
let pool: pg.Pool
let url: string
let installed: string
let bare: string
before(async () => {
  ;({ pool, url, installed, bare } = await ready)
})

describe('database errors exit 1 with one line that says what to do, and the password is never printed', () => {
  test('an unreachable database names the host and port, and never the password', async () => {
    const port = await freePort()
    const run = await cli(['status', '--url', `postgres://app:hunter2@127.0.0.1:${port}/app`])
    assertFails(
      run,
      1,
      new RegExp(`cannot connect to 127\\.0\\.0\\.1:${port}/app: connection refused; check that Postgres runs there`),
    )
    assert.ok(!run.stderr.includes('hunter2'))
    assertFails(await cli(['migrate'], { DATABASE_URL: `postgres://127.0.0.1:${port}/app` }), 1, /connection refused/)
  })

  test('a wrong password says to check the credentials', async () => {
    const wrong = new URL(url)
    wrong.password = 'not-the-password'
    const run = await cli(['status', '--url', wrong.href])
    assertFails(run, 1, /cannot log in to .*: password authentication failed .*; check the user and password/)
    assert.ok(!run.stderr.includes('not-the-password'))
  })

  test('the password of a URL that works appears neither on stdout nor on stderr', async () => {
    const password = decodeURIComponent(new URL(url).password)
    assert.ok(password.length >= 8, 'the test database has a password')
    const table = await freshTable(pool, 'cli_secret')
    await withCronLease(pool, 'job', 60_000, () => {}, { table })
    for (const args of [
      ['migrate', '--table', table],
      ['status', '--table', table],
      ['status', '--table', table, '--json'],
      ['check', '--table', table, '--job', 'nope'],
      ['pause', 'job', '--for', '1m', '--table', table],
      ['release', 'nope', '--table', table],
      ['status', '--table', 'no_such_leases'],
    ]) {
      for (const via of ['--url', 'DATABASE_URL']) {
        const run = via === '--url' ? await cli([...args, '--url', url], { DATABASE_URL: undefined }) : await cli(args)
        assert.notEqual(run.stdout + run.stderr, '', `${args.join(' ')} printed something`)
        assert.ok(!`${run.stdout}${run.stderr}`.includes(password), `${args.join(' ')} via ${via}`)
      }
    }
  })

  test('a statement cut by statement_timeout (57014) or lock_timeout (55P03) names that setting, not a failed connection', async () => {
    const table = await freshTable(pool, 'cli_timeouts')
    await withCronLease(pool, 'job', 60_000, () => {}, { table })
    // A lock that every read of the table waits for, so the session's timeout surely runs out.
    const locker = await pool.connect()
    try {
      await locker.query('BEGIN')
      await locker.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
      for (const [setting, code] of [
        ['statement_timeout', '57014'],
        ['lock_timeout', '55P03'],
      ] as const) {
        const session = new URL(url)
        session.searchParams.set('options', `-c ${setting}=200`)
        for (const args of [['status'], ['check'], ['history']]) {
          const run = await cli([...args, '--table', table, '--url', session.href])
          assertFails(run, 1, new RegExp(`${setting}.*\\(SQLSTATE ${code}\\)`))
          assert.doesNotMatch(run.stderr, /cannot connect|no answer/, `${args[0]} under ${setting}`)
        }
      }
    } finally {
      await locker.query('ROLLBACK')
      locker.release()
    }
  })

  test('a server that never answers is still "cannot connect": no answer within 10 s', async () => {
    // Accepts the TCP connection and says nothing: the connect timeout is the only way out.
    const sockets: net.Socket[] = []
    const silent = net.createServer((socket) => sockets.push(socket))
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const { port } = silent.address() as net.AddressInfo
    try {
      const run = await cli(['status', '--url', `postgres://app:hunter2@127.0.0.1:${port}/app`])
      assertFails(
        run,
        1,
        new RegExp(`cannot connect to 127\\.0\\.0\\.1:${port}/app: no answer within 10 s; check the host and port`),
      )
    } finally {
      for (const socket of sockets) socket.destroy()
      silent.close()
    }
  })

  test('a missing table suggests migrate, with the same --table', async () => {
    assertFails(
      await cli(['status', '--table', 'no_such_leases']),
      1,
      /the lease table no_such_leases does not exist in .*; create it with: pg-cron-lease migrate --table no_such_leases/,
    )
    // The default table, looked up through a search_path where no cron_leases exists.
    await pool.query('CREATE SCHEMA IF NOT EXISTS cli_empty_schema')
    const elsewhere = new URL(url)
    elsewhere.searchParams.set('options', '-c search_path=cli_empty_schema')
    assertFails(
      await cli(['status', '--url', elsewhere.href]),
      1,
      /the lease table cron_leases does not exist in .*; create it with: pg-cron-lease migrate \(same --url\)$/m,
    )
  })
})

describe('the pg driver is an optional peer', () => {
  test('without pg, status and migrate say to install it (exit 1); sql still works', async () => {
    for (const command of ['status', 'migrate']) {
      assertFails(await cli([command], {}, bare), 1, /the "pg" package is not installed.*run npm install pg/)
    }
    assert.deepEqual(await cli(['sql'], {}, bare), { code: 0, stdout: createTableSql(), stderr: '' })
  })
})

describe('a closed stdout is not an error', () => {
  test('status | head -1: the first line arrives, and the rest hitting a closed pipe (EPIPE) exits 0 without a stack trace', async () => {
    const table = await freshTable(pool, 'cli_epipe')
    // Far more output than a pipe holds, so the bin is still writing when the reader goes away.
    await pool.query(
      `INSERT INTO "${table}" (job_name, lease_until, holder)
       SELECT 'job:' || lpad(i::text, 5, '0') || repeat('x', 60), clock_timestamp() + interval '1 hour', 'web-1'
       FROM generate_series(1, 5000) AS i`,
    )
    const child = spawn(process.execPath, [path.join(installed, BIN_PATH), 'status', '--table', table], {
      env: { ...process.env, DATABASE_URL: url, NO_COLOR: '1' },
    })
    let first = ''
    child.stdout.on('data', (chunk: Buffer) => {
      first += chunk
      if (first.includes('\n')) child.stdout.destroy()
    })
    const { code, signal, stderr } = await finished(child, { killAfterMs: 30_000 })
    assert.deepEqual({ code, signal, stderr }, { code: 0, signal: null, stderr: '' })
    assert.match(first, new RegExp(`^${table}: 5000 jobs, 5000 held \\(database clock `))
  })
})
