/**
 * Acting without a deploy: pauseJob, resumeJob and releaseLease, seen from other replicas (their
 * own pools) and from a tick that is running at that moment.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { type LeaseContext, listLeases, pauseJob, releaseLease, resumeJob, withCronLease } from '../../../src/index.ts'

let operator: pg.Pool
let replica: pg.Pool
let table: string
let job = 0
const nextJob = () => `admin-${++job}`

before(async () => {
  operator = await testPool({ max: 2 })
  replica = await testPool({ max: 4 })
  table = await freshTable(operator, 'admin')
})
after(async () => {
  await operator.end()
  await replica.end()
})

/** One claim attempt by another replica, on its own pool. */
const claimRuns = async (jobName: string, leaseMs = 60_000) =>
  (await withCronLease(replica, jobName, leaseMs, () => {}, { table, holder: 'replica' })).ran

const state = async (jobName: string) => (await listLeases(operator, { table })).find((l) => l.jobName === jobName)!

/** Starts a tick that keeps its context and runs until `finish` is called. */
async function running(jobName: string, opts: { keepAlive?: { beatMs: number; extendMs: number } } = {}) {
  let ctx!: LeaseContext
  let finish!: () => void
  const outcome = withCronLease(
    replica,
    jobName,
    60_000,
    (c) => {
      ctx = c
      return new Promise<void>((resolve) => {
        finish = resolve
      })
    },
    { table, holder: 'running', ...opts },
  )
  while (!ctx) await sleep(5)
  return {
    ctx,
    finish: () => {
      finish()
      return outcome
    },
  }
}

describe('pause and resume', () => {
  test('an open-ended pause stops every replica from claiming until resume; other jobs are untouched', async () => {
    const [paused, other] = [nextJob(), nextJob()]
    assert.equal(await claimRuns(paused, 1), true)
    assert.equal(await claimRuns(other, 1), true)
    await sleep(5)
    assert.equal(await pauseJob(operator, paused, { table }), true)
    for (let i = 0; i < 3; i++) assert.equal(await claimRuns(paused, 1), false)
    const row = await state(paused)
    assert.deepEqual([row.paused, row.pausedUntil, row.leaseUntil, row.held], [true, 'infinity', 'infinity', true])
    assert.equal(row.remainingMs, Number.POSITIVE_INFINITY)
    assert.equal((await state(other)).paused, false)
    assert.equal(await claimRuns(other, 1), true, 'another job is claimable as before')
    assert.equal(await resumeJob(operator, paused, { table }), true)
    assert.equal((await state(paused)).paused, false)
    assert.equal(await claimRuns(paused), true, 'claimable at once after resume')
  })

  test('a pause for a length, or until a time, ends by itself by the database clock', async () => {
    const [forJob, untilJob] = [nextJob(), nextJob()]
    for (const j of [forJob, untilJob]) assert.equal(await claimRuns(j, 1), true)
    await sleep(5)
    await pauseJob(operator, forJob, { table, forMs: 300 })
    await pauseJob(operator, untilJob, { table, until: new Date(Date.now() + 300) })
    for (const j of [forJob, untilJob]) assert.equal(await claimRuns(j), false, `${j} is paused`)
    await sleep(450)
    for (const j of [forJob, untilJob]) assert.equal(await claimRuns(j), true, `${j}'s pause ran out`)
  })

  test('resume after a pause that already ran out leaves the lease claimed since alone', async () => {
    const jobName = nextJob()
    assert.equal(await claimRuns(jobName, 1), true)
    await sleep(5)
    await pauseJob(operator, jobName, { table, forMs: 50 })
    await sleep(100)
    assert.equal(await claimRuns(jobName), true)
    assert.equal(await resumeJob(operator, jobName, { table }), true)
    assert.equal(await claimRuns(jobName), false, 'the new claim still holds its lease')
  })

  test('a tick running when the job is paused is told: its next beat fails and ctx.signal aborts', async () => {
    const jobName = nextJob()
    const tick = await running(jobName, { keepAlive: { beatMs: 50, extendMs: 60_000 } })
    // Listened to first: a beat can notice the pause before pauseJob returns.
    const aborted = new Promise((resolve) => tick.ctx.signal.addEventListener('abort', resolve))
    await pauseJob(operator, jobName, { table, forMs: 60_000 })
    await Promise.race([aborted, sleep(2000).then(() => assert.fail('the signal did not abort within 2 s'))])
    assert.equal(await tick.ctx.renew(1000), false, 'renew cannot shorten the pause')
    assert.equal((await tick.finish()).ran, true)
    const row = await state(jobName)
    assert.equal(row.paused, true, 'still paused after the tick settled')
    assert.equal(row.lastOutcome, 'ok', 'the run that did happen is recorded')
  })
})

describe('release', () => {
  test("ends a crashed holder's long lease now: the next claim on another replica runs", async () => {
    const jobName = nextJob()
    assert.equal(await claimRuns(jobName, 3_600_000), true)
    assert.equal(await claimRuns(jobName), false)
    assert.equal(await releaseLease(operator, jobName, { table }), true)
    assert.equal((await state(jobName)).held, false)
    assert.equal(await claimRuns(jobName), true)
  })

  test('a tick still running when its lease is released finds renew false and its signal aborted', async () => {
    const jobName = nextJob()
    const tick = await running(jobName)
    await releaseLease(operator, jobName, { table })
    assert.equal(await tick.ctx.renew(), false)
    assert.equal(tick.ctx.signal.aborted, true)
    await tick.finish()
  })

  test('release does not lift a pause: the lease then ends when the pause does', async () => {
    const jobName = nextJob()
    await claimRuns(jobName, 3_600_000)
    await pauseJob(operator, jobName, { table, forMs: 300 })
    await releaseLease(operator, jobName, { table })
    assert.equal(await claimRuns(jobName), false, 'still paused')
    const row = await state(jobName)
    assert.equal(row.leaseUntil, row.pausedUntil)
    await sleep(400)
    assert.equal(await claimRuns(jobName), true)
  })
})

describe('jobs without a row, and tables of the original shape', () => {
  test('each resolves false for a job that has no row, and creates none', async () => {
    assert.equal(await pauseJob(operator, 'never-claimed', { table }), false)
    assert.equal(await resumeJob(operator, 'never-claimed', { table }), false)
    assert.equal(await releaseLease(operator, 'never-claimed', { table }), false)
    assert.equal(await state('never-claimed'), undefined)
  })

  test('release works on the original shape; pause and resume refuse it, naming migrate, and write nothing', async () => {
    const original = `original_${randomBytes(4).toString('hex')}`
    await operator.query(`CREATE TABLE "${original}" (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL,
      holder TEXT, claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`)
    const opts = { table: original, logger: { warn() {} } }
    assert.equal((await withCronLease(replica, 'job', 3_600_000, () => {}, opts)).ran, true)
    assert.equal(await releaseLease(operator, 'job', { table: original }), true)
    assert.equal((await withCronLease(replica, 'job', 3_600_000, () => {}, opts)).ran, true)
    const before = await operator.query(`SELECT * FROM "${original}"`)
    await assert.rejects(
      pauseJob(operator, 'job', { table: original }),
      /pausing needs columns .* run `pg-cron-lease migrate --table original_/,
    )
    await assert.rejects(
      resumeJob(operator, 'job', { table: original }),
      /resuming needs columns .* run `pg-cron-lease migrate --table original_/,
    )
    assert.deepEqual((await operator.query(`SELECT * FROM "${original}"`)).rows, before.rows)
  })
})

describe('the end of a pause is judged by the database clock, and stays readable', () => {
  test('an until that is not in the future by the database clock is refused, naming opts.until, and writes nothing', async () => {
    const jobName = nextJob()
    assert.equal(await claimRuns(jobName, 1), true)
    const before = (await operator.query(`SELECT * FROM "${table}" WHERE job_name = $1`, [jobName])).rows
    const { rows } = await operator.query('SELECT clock_timestamp() AS now')
    const past = new Date(rows[0].now.getTime() - 60_000)
    await assert.rejects(
      pauseJob(operator, jobName, { table, until: past }),
      (e: unknown) =>
        e instanceof TypeError && /opts\.until must be a time in the future by the database clock/.test(e.message),
    )
    assert.deepEqual((await operator.query(`SELECT * FROM "${table}" WHERE job_name = $1`, [jobName])).rows, before)
  })

  test('forMs up to Number.MAX_SAFE_INTEGER is a pause until resumed, and every time listLeases returns reads as a date', async () => {
    const jobName = nextJob()
    assert.equal(await claimRuns(jobName, 1), true)
    assert.equal(await pauseJob(operator, jobName, { table, forMs: Number.MAX_SAFE_INTEGER }), true)
    const paused = await state(jobName)
    assert.equal(paused.paused, true)
    assert.equal(paused.pausedUntil, 'infinity')
    assert.equal(paused.leaseUntil, 'infinity')
    const longest = 253_402_300_799_999 - Date.now() - 86_400_000
    assert.equal(await pauseJob(operator, jobName, { table, forMs: longest }), true)
    const dated = await state(jobName)
    assert.match(dated.pausedUntil!, /^9999-12-3[01]T/)
    for (const [key, value] of Object.entries(dated)) {
      if (typeof value === 'string' && /^\d{4}-\d\d-\d\dT/.test(value)) {
        assert.ok(Number.isFinite(new Date(value).getTime()), `${key} ${value} reads as a date`)
      }
    }
    assert.equal(await claimRuns(jobName), false)
    await resumeJob(operator, jobName, { table })
  })

  test('resume says whether a pause was in force', async () => {
    const jobName = nextJob()
    assert.equal(await claimRuns(jobName, 1), true)
    await pauseJob(operator, jobName, { table, forMs: 60_000 })
    const { resume } = await import('../../../src/admin.ts')
    assert.equal((await resume(operator, jobName, { table }))?.wasPaused, true)
    assert.equal((await resume(operator, jobName, { table }))?.wasPaused, false)
  })
})

describe('a refused pause touches nothing', () => {
  test('an until already past, inside a caller’s transaction: no row lock, no transaction ID, claims go on', async () => {
    const jobName = nextJob()
    assert.equal(await claimRuns(jobName, 1), true)
    const client = await operator.connect()
    try {
      await client.query('BEGIN')
      await assert.rejects(pauseJob(client, jobName, { table, until: '2001-01-01T00:00:00Z' }), TypeError)
      const { rows } = await client.query('SELECT pg_current_xact_id_if_assigned() AS xid')
      assert.equal(rows[0].xid, null, 'no transaction ID was taken')
      assert.equal(await claimRuns(jobName), true, 'another replica claims while the transaction is open')
      await client.query('ROLLBACK')
    } finally {
      client.release()
    }
  })
})
