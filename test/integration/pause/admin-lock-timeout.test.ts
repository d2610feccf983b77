/**
 * An admin change behind a crashed holder: a tick fenced its writes (FOR KEY SHARE) and its
 * transaction stays open, idle, for ever. pauseJob, resumeJob and releaseLease, and the pause,
 * resume and release commands, wait for the job's row lock a bounded time, then say which job and
 * which backend holds it, change nothing, and leave a caller's transaction as it was.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { main } from '../../../src/cli/main.ts'
import { ERROR_CODES } from '../../../src/errors.ts'
import { pauseJob, quoteTable, releaseLease, resumeJob, withCronLease } from '../../../src/index.ts'

const { ROW_LOCKED } = ERROR_CODES
const HOLDER_NAME = `crashed-holder-${randomBytes(3).toString('hex')}`

let url: string
let pool: pg.Pool
let table: string
let jobs = 0
const nextJob = () => `locked-${++jobs}`

before(async () => {
  url = await testDatabaseUrl()
  pool = await testPool({ max: 4 })
  table = await freshTable(pool, 'lock_timeout')
})
after(async () => {
  await pool.end()
})

/**
 * A job whose tick fenced on a client of its own and never committed: the client stays idle in
 * its transaction, holding FOR KEY SHARE on the job's row. Resolves the job, the holder's pid, and
 * how to end it.
 */
async function crashedHolder() {
  const job = nextJob()
  const holder = new pg.Client({ connectionString: url, application_name: HOLDER_NAME })
  await holder.connect()
  await holder.query('BEGIN')
  const { ran } = await withCronLease(pool, job, 60_000, (ctx) => ctx.fence(holder), { table })
  assert.equal(ran, true)
  const pid = (await holder.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number
  const row = async () => (await pool.query(`SELECT * FROM ${quoteTable(table)} WHERE job_name = $1`, [job])).rows
  return { job, pid, row, end: () => holder.end() }
}

/** Resolves how long `change` took to settle and the error it rejected with. */
async function timed(change: () => Promise<unknown>) {
  const started = performance.now()
  const error = await change().then(
    () => assert.fail('the change resolved although the row was locked'),
    (e: unknown) => e as Error & { code?: unknown },
  )
  return { ms: performance.now() - started, error }
}

const CHANGES = {
  pauseJob: (job: string, opts: object) => pauseJob(pool, job, { table, ...opts }),
  resumeJob: (job: string, opts: object) => resumeJob(pool, job, { table, ...opts }),
  releaseLease: (job: string, opts: object) => releaseLease(pool, job, { table, ...opts }),
}

describe('behind an idle transaction holding the row, a change ends in bounded time, naming the job and the holder', {
  timeout: 60_000,
}, () => {
  for (const [name, change] of Object.entries(CHANGES)) {
    test(`${name} with lockTimeoutMs 300 rejects after about 300 ms, with the pid and application_name, and writes nothing`, async () => {
      const holder = await crashedHolder()
      try {
        const before = await holder.row()
        const { ms, error } = await timed(() => change(holder.job, { lockTimeoutMs: 300 }))
        assert.equal(error.code, ROW_LOCKED, String(error))
        assert.ok(ms >= 250 && ms < 5_000, `settled after ${Math.round(ms)} ms`)
        assert.match(error.message, new RegExp(`'${holder.job}'`))
        assert.match(error.message, new RegExp(`pid ${holder.pid} \\(application_name "${HOLDER_NAME}"\\)`))
        assert.match(error.message, /nothing was changed/)
        assert.doesNotMatch(error.message, /\n/, 'one line')
        assert.deepEqual(await holder.row(), before)
      } finally {
        await holder.end()
      }
    })
  }

  test('by default the wait is 5 s', async () => {
    const holder = await crashedHolder()
    try {
      const { ms, error } = await timed(() => releaseLease(pool, holder.job, { table }))
      assert.equal(error.code, ROW_LOCKED, String(error))
      assert.match(error.message, /stayed locked for 5000 ms/)
      assert.ok(ms >= 4_900 && ms < 15_000, `settled after ${Math.round(ms)} ms`)
    } finally {
      await holder.end()
    }
  })

  test('once the holder is gone the same change goes through', async () => {
    const holder = await crashedHolder()
    await holder.end()
    assert.equal(await releaseLease(pool, holder.job, { table, lockTimeoutMs: 300 }), true)
  })
})

describe("a caller's transaction keeps its own lock_timeout, and stays usable", { timeout: 30_000 }, () => {
  test('a change that timed out, then one that went through, inside BEGIN: lock_timeout is still the caller’s, and the transaction commits', async () => {
    const holder = await crashedHolder()
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      await client.query("SET LOCAL lock_timeout = '42s'")
      const { error } = await timed(() => pauseJob(client, holder.job, { table, lockTimeoutMs: 300 }))
      assert.equal(error.code, ROW_LOCKED, String(error))
      assert.equal((await client.query('SHOW lock_timeout')).rows[0].lock_timeout, '42s')
      await holder.end()
      assert.equal(await pauseJob(client, holder.job, { table, lockTimeoutMs: 300 }), true)
      assert.equal((await client.query('SHOW lock_timeout')).rows[0].lock_timeout, '42s')
      await client.query('COMMIT')
    } finally {
      client.release()
    }
    const { rows } = await pool.query(`SELECT paused_until FROM ${quoteTable(table)} WHERE job_name = $1`, [holder.job])
    assert.equal(rows[0].paused_until, Number.POSITIVE_INFINITY, 'the pause was committed')
  })

  test('outside a transaction, the session keeps its lock_timeout after a change', async () => {
    const job = nextJob()
    await withCronLease(pool, job, 1, () => {}, { table })
    const client = await pool.connect()
    try {
      await client.query("SET lock_timeout = '7s'")
      assert.equal(await releaseLease(client, job, { table, lockTimeoutMs: 300 }), true)
      assert.equal((await client.query('SHOW lock_timeout')).rows[0].lock_timeout, '7s')
      await client.query('RESET lock_timeout')
    } finally {
      client.release()
    }
  })
})

describe('the pause, resume and release commands', { timeout: 60_000 }, () => {
  for (const command of ['pause', 'resume', 'release']) {
    test(`${command} --lock-timeout 1s exits 1 after about a second, with one line naming the job, the pid and the application_name`, async () => {
      const holder = await crashedHolder()
      try {
        let stdout = ''
        let stderr = ''
        const started = performance.now()
        const code = await main([command, holder.job, '--table', table, '--lock-timeout', '1s'], {
          stdout: { write: (t: string) => (stdout += t) },
          stderr: { write: (t: string) => (stderr += t) },
          env: { DATABASE_URL: url },
        })
        const ms = performance.now() - started
        assert.equal(code, 1, stderr)
        assert.equal(stdout, '')
        assert.ok(ms >= 950 && ms < 8_000, `exited after ${Math.round(ms)} ms`)
        const lines = stderr.split('\n').filter(Boolean)
        assert.equal(lines.length, 1, stderr)
        assert.match(lines[0]!, new RegExp(`cannot ${command} '${holder.job}'`))
        assert.match(lines[0]!, new RegExp(`pid ${holder.pid} \\(application_name "${HOLDER_NAME}"\\)`))
        assert.match(lines[0]!, /--lock-timeout/)
      } finally {
        await holder.end()
      }
    })
  }
})
