/**
 * A pause is planned, not a failure: the occurrences that fall due while a job is paused are
 * neither overdue nor missed, and once the pause ends (by resume or by running out) the job is due
 * at its first occurrence at or after the end. An hourly job last claimed at 08:00, paused from
 * 08:30 to 10:20: the real statements run at each step, and the hours between are skipped by
 * moving every timestamp of the row back, so the database's own clock arithmetic decides.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { main } from '../../../src/cli/main.ts'
import { catchUp, listLeases, pauseJob, quoteTable, resumeJob, withCronLease } from '../../../src/index.ts'

const MIN = 60_000
const HOUR = 60 * MIN
const quiet = { warn() {}, debug() {} }

let pool: pg.Pool
let url: string
let table: string
let jobs = 0
const nextJob = () => `hourly-${++jobs}`

before(async () => {
  url = await testDatabaseUrl()
  pool = await testPool({ max: 4 })
  table = await freshTable(pool, 'pause_slots')
})
after(async () => {
  await pool.end()
})

/** The database clock now, in ms since the epoch. */
async function dbNow(): Promise<number> {
  const { rows } = await pool.query('SELECT clock_timestamp() AS now')
  return (rows[0].now as Date).getTime()
}

/** Moves every timestamp of the job's row `ms` into the past: as if that much time had gone by. */
async function elapse(job: string, ms: number) {
  const columns = ['claimed_at', 'lease_until', 'last_started_at', 'last_finished_at', 'last_success_at']
  const more = ['paused_until', 'claim_until', 'last_occurrence', 'next_due_at', 'next_occurrence']
  const set = [...columns, ...more].map((c) => `${c} = ${c} - $2::float8 * interval '1 millisecond'`).join(', ')
  const { rowCount } = await pool.query(`UPDATE ${quoteTable(table)} SET ${set} WHERE job_name = $1`, [job, ms])
  assert.equal(rowCount, 1)
}

/** An hourly claim of the occurrence that is now, by the database clock. */
async function claimHour(job: string) {
  let missed: number | undefined
  const occurrence = new Date(await dbNow())
  const { ran } = await withCronLease(
    pool,
    job,
    5 * MIN,
    (ctx) => {
      missed = ctx.missed
    },
    { table, occurrence, everyMs: HOUR, logger: quiet },
  )
  return { ran, missed }
}

const leaseOf = async (job: string) => (await listLeases(pool, { table })).find((l) => l.jobName === job)!

/** The CLI, in-process, on the test database. */
async function cli(...args: string[]) {
  let stdout = ''
  const code = await main([...args, '--table', table], {
    stdout: { write: (t: string) => (stdout += t) },
    stderr: { write: () => true },
    env: { DATABASE_URL: url },
  })
  return { code, stdout }
}

/** 08:00 claimed, 08:30 paused until 10:20 (`--for 110m`, or open-ended then resumed); now 10:20. */
async function pausedUntil1020(how: 'for' | 'resume'): Promise<string> {
  const job = nextJob()
  assert.equal((await claimHour(job)).ran, true, '08:00 runs')
  await elapse(job, 30 * MIN)
  assert.equal(await pauseJob(pool, job, { table, ...(how === 'for' ? { forMs: 110 * MIN } : {}) }), true)
  await elapse(job, 110 * MIN)
  if (how === 'resume') assert.equal(await resumeJob(pool, job, { table }), true)
  return job
}

for (const how of ['for', 'resume'] as const) {
  describe(`a pause ended ${how === 'for' ? 'by running out (pause --for)' : 'by resume'}`, () => {
    test('at 10:20 the job is not overdue, check exits 0, and it is next due at 11:00', async () => {
      const job = await pausedUntil1020(how)
      const lease = await leaseOf(job)
      assert.equal(lease.paused, false)
      assert.equal(lease.overdue, false, '09:00 and 10:00 fell due while paused')
      assert.ok(lease.resumedAt !== null, 'the end of the pause is reported')
      const end = Date.parse(lease.resumedAt)
      assert.ok(Math.abs(Date.parse(lease.checkedAt) - end) < 10 * MIN, 'it ended about now')
      // 08:00 + 3 h: the first hour at or after 10:20, to the millisecond of the 08:00 claim's schedule.
      const first = Date.parse(lease.lastOccurrence!) + 3 * HOUR
      assert.ok(Math.abs(Date.parse(lease.nextDueAt!) - first) < 1000, `next due ${lease.nextDueAt}`)
      const check = await cli('check', '--job', job)
      assert.equal(check.code, 0, check.stdout)
      const status = await cli('status')
      assert.match(status.stdout, new RegExp(`${job}: resumed at ${lease.resumedAt}`))
    })

    test('the 11:00 winner counts nothing missed, and the missed total stays 0', async () => {
      const job = await pausedUntil1020(how)
      await elapse(job, 40 * MIN)
      assert.deepEqual(await claimHour(job), { ran: true, missed: 0 })
      const lease = await leaseOf(job)
      assert.equal(lease.missed, 0)
      assert.equal(lease.resumedAt, null, 'the claim stored a due time after the pause')
      const metrics = await cli('status', '--format', 'prometheus')
      assert.match(metrics.stdout, new RegExp(`^pg_cron_lease_missed_occurrences_total\\{job_name="${job}"\\} 0$`, 'm'))
    })

    test('occurrences after the end that nobody claims are still missed: the 13:00 winner counts 11:00 and 12:00', async () => {
      const job = await pausedUntil1020(how)
      await elapse(job, 160 * MIN)
      assert.deepEqual(await claimHour(job), { ran: true, missed: 2 })
      assert.equal((await leaseOf(job)).missed, 2)
    })

    test('it is overdue once 11:00 is more than the grace ago, and check says due 11:00', async () => {
      const job = await pausedUntil1020(how)
      await elapse(job, 42 * MIN)
      const lease = await leaseOf(job)
      assert.equal(lease.overdue, true, 'two minutes past 11:00, the grace one minute')
      const check = await cli('check', '--job', job)
      assert.equal(check.code, 3)
      assert.match(check.stdout, new RegExp(`OVERDUE: due ${lease.nextDueAt}, not claimed for 2 min`))
    })
  })
}

describe('a pause, seen while it holds and with no interval known', () => {
  test('while paused, status says until when, and the job is next due at its first occurrence after the end', async () => {
    const job = nextJob()
    await claimHour(job)
    await elapse(job, 30 * MIN)
    await pauseJob(pool, job, { table, forMs: 110 * MIN })
    await elapse(job, 60 * MIN)
    const lease = await leaseOf(job)
    assert.deepEqual([lease.paused, lease.overdue, lease.resumedAt], [true, false, null])
    assert.ok(Date.parse(lease.nextDueAt!) - Date.parse(lease.checkedAt) > 45 * MIN, `next due ${lease.nextDueAt}`)
    const status = await cli('status')
    assert.match(status.stdout, new RegExp(`${job}: paused until ${lease.pausedUntil}`))
  })

  test('with no interval known the job is due at the end itself', async () => {
    const job = nextJob()
    await claimHour(job)
    await pool.query(`UPDATE ${quoteTable(table)} SET every_ms = NULL WHERE job_name = $1`, [job])
    await elapse(job, 30 * MIN)
    await pauseJob(pool, job, { table, forMs: 110 * MIN })
    await elapse(job, 110 * MIN + 30_000)
    const within = await leaseOf(job)
    assert.equal(within.nextDueAt, within.resumedAt, 'due at the end of the pause')
    assert.equal(within.overdue, false, 'the pause ended 30 s ago, within the grace of 1 min')
    await elapse(job, 60_000)
    assert.equal((await leaseOf(job)).overdue, true, 'the end of the pause was 90 s ago')
  })

  test('a catch-up after the pause makes up none of the skipped occurrences', async () => {
    const job = nextJob()
    await claimHour(job)
    await elapse(job, 30 * MIN)
    await pauseJob(pool, job, { table, forMs: 110 * MIN })
    await elapse(job, 110 * MIN)
    const outcome = await catchUp(pool, job, 5 * MIN, () => {}, {
      table,
      withinMs: 6 * HOUR,
      everyMs: HOUR,
      logger: quiet,
    })
    assert.equal(outcome.ran, false, '09:00 and 10:00 were skipped by the pause, not missed')
  })
})

describe('what a pause does not forgive', () => {
  test('occurrences already missed when a pause begins are counted then: paused at 09:30, the 09:00 is missed, the 10:00 is not', async () => {
    const job = nextJob()
    await claimHour(job)
    await elapse(job, 90 * MIN)
    assert.equal((await leaseOf(job)).missed, 0, 'not counted yet: nobody has claimed since')
    await pauseJob(pool, job, { table, forMs: 50 * MIN })
    const paused = await leaseOf(job)
    assert.equal(paused.missed, 1, 'the pause counts 09:00, which fell due before it')
    await elapse(job, 90 * MIN)
    const after = await leaseOf(job)
    assert.equal(after.overdue, false, 'at 11:00, 10:00 fell due while paused')
    assert.deepEqual(await claimHour(job), { ran: true, missed: 0 })
    assert.equal((await leaseOf(job)).missed, 1, 'the 09:00, and only it')
  })

  test('a second pause counts the occurrences between the two: paused to 10:20, then again at 12:30, 11:00 and 12:00 are missed', async () => {
    const job = await pausedUntil1020('for')
    await elapse(job, 130 * MIN)
    await pauseJob(pool, job, { table, forMs: 60 * MIN })
    assert.equal((await leaseOf(job)).missed, 2)
    await elapse(job, 90 * MIN)
    assert.deepEqual(await claimHour(job), { ran: true, missed: 0 }, 'at 14:00, 13:00 fell due while paused')
    assert.equal((await leaseOf(job)).missed, 2)
  })

  test('a pause that replaces a pause in force counts nothing', async () => {
    const job = nextJob()
    await claimHour(job)
    await elapse(job, 30 * MIN)
    await pauseJob(pool, job, { table, forMs: 110 * MIN })
    await elapse(job, 60 * MIN)
    await pauseJob(pool, job, { table, forMs: 50 * MIN })
    assert.equal((await leaseOf(job)).missed, 0, '09:00 fell due while the first pause held')
  })
})
