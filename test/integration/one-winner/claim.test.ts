import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { race } from '../../../dev/race.ts'
import { withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
let table: string
let job = 0
const nextJob = () => `job-${++job}`

before(async () => {
  pool = await testPool({ max: 30 })
  table = await freshTable(pool, 'claim')
})
after(() => pool.end())

const row = async (jobName: string) =>
  (
    await pool.query(
      `SELECT holder, extract(epoch FROM lease_until - claimed_at) * 1000 AS lease_ms,
              lease_until > clock_timestamp() AS held
       FROM "${table}" WHERE job_name = $1`,
      [jobName],
    )
  ).rows[0]

describe('exactly one replica runs each occurrence', () => {
  test('two replicas firing the same tick: exactly one runs', async () => {
    const jobName = nextJob()
    const runs: string[] = []
    const outcomes = await Promise.all(
      ['a', 'b'].map((holder) => withCronLease(pool, jobName, 5000, () => runs.push(holder), { table, holder })),
    )
    assert.equal(runs.length, 1)
    assert.deepEqual(outcomes.map((o) => o.ran).sort(), [false, true])
    assert.equal((await row(jobName)).holder, runs[0])
  })

  test('ten claimants racing one occurrence, 200 rounds: exactly one winner every round', async () => {
    const clients = await Promise.all(Array.from({ length: 10 }, () => pool.connect()))
    try {
      const report = await race({ claimants: clients, table, jobName: nextJob(), rounds: 200 })
      assert.deepEqual(report, { rounds: 200, single: 200, none: 0, violations: 0 })
    } finally {
      for (const c of clients) c.release()
    }
  })

  test('a replica whose timer fires late, inside the lease, is skipped', async () => {
    const jobName = nextJob()
    assert.equal((await withCronLease(pool, jobName, 2000, () => 1, { table, holder: 'on-time' })).ran, true)
    await sleep(300)
    const late = await withCronLease(pool, jobName, 2000, () => 1, { table, holder: 'late' })
    assert.deepEqual(late, { ran: false, result: null })
    assert.equal((await row(jobName)).holder, 'on-time')
  })

  test('an expired lease is claimed again, and the row shows the new holder', async () => {
    const jobName = nextJob()
    await withCronLease(pool, jobName, 150, () => {}, { table, holder: 'first' })
    await sleep(250)
    const again = await withCronLease(pool, jobName, 5000, () => 'second ran', { table, holder: 'second' })
    assert.deepEqual(again, { ran: true, result: 'second ran' })
    const r = await row(jobName)
    assert.equal(r.holder, 'second')
    assert.equal(r.held, true)
  })

  test('a failed tick keeps its lease: the next claimant inside the lease is skipped', async () => {
    const jobName = nextJob()
    await assert.rejects(
      withCronLease(pool, jobName, 5000, () => Promise.reject(new Error('boom')), { table, holder: 'fails' }),
      /boom/,
    )
    assert.equal((await row(jobName)).held, true)
    assert.equal((await withCronLease(pool, jobName, 5000, () => 1, { table, holder: 'next' })).ran, false)
  })

  test('the lease lasts leaseMs by the database clock', async () => {
    const jobName = nextJob()
    await withCronLease(pool, jobName, 1234, () => {}, { table })
    assert.equal(Number((await row(jobName)).lease_ms), 1234, 'exactly, on the insert branch')
    await expireLease(pool, table, jobName)
    await withCronLease(pool, jobName, 4321, () => {}, { table })
    // Measured from the win, a moment after the token was read: never less, and by no more than
    // the statement's own run time.
    const updated = Number((await row(jobName)).lease_ms)
    assert.ok(updated >= 4321 && updated < 4321 + 50, `at least leaseMs from the token, got ${updated} ms`)
  })
})

describe('the clock is clock_timestamp(), not the transaction start', () => {
  test('a claim through a client whose transaction opened before the lease expired still wins', async () => {
    const jobName = nextJob()
    await withCronLease(pool, jobName, 200, () => {}, { table, holder: 'first' })
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      await client.query('SELECT 1') // the transaction's now() is fixed here, inside the lease
      await sleep(700) // the lease expired 0.5 s ago by the database clock
      const outcome = await withCronLease(client, jobName, 5000, () => 'won', { table, holder: 'in-tx' })
      await client.query('COMMIT')
      assert.deepEqual(outcome, { ran: true, result: 'won' })
    } finally {
      client.release()
    }
    assert.equal((await row(jobName)).holder, 'in-tx')
  })
  test('a claimant that finds an expired row locked (by a claim racing it) loses at once: no wait, no write', async () => {
    const jobName = nextJob()
    await withCronLease(pool, jobName, 50, () => {}, { table })
    await sleep(100)
    const locker = await pool.connect()
    try {
      await locker.query('BEGIN')
      await locker.query(`SELECT 1 FROM "${table}" WHERE job_name = $1 FOR UPDATE`, [jobName])
      const claim = withCronLease(pool, jobName, 1000, () => 'won', { table, holder: 'skipped' })
      const first = await Promise.race([claim, sleep(5000).then(() => 'still waiting')])
      assert.deepEqual(first, { ran: false, result: null }, 'it did not wait for the lock')
      await locker.query('COMMIT')
    } finally {
      locker.release()
    }
    const next = await withCronLease(pool, jobName, 1000, () => 'won', { table, holder: 'after' })
    assert.deepEqual(next, { ran: true, result: 'won' }, 'once nobody holds the row, the next claim wins')
    const { rows } = await pool.query(
      `SELECT extract(epoch FROM lease_until - clock_timestamp()) * 1000 AS left_ms FROM "${table}" WHERE job_name = $1`,
      [jobName],
    )
    assert.ok(rows[0].left_ms > 800, `${Math.round(rows[0].left_ms)} ms left of a 1000 ms lease`)
  })
})

describe('a custom, schema-qualified table', () => {
  test('claim, skip, renew and re-claim work end to end in jobs.leases', async () => {
    const { createTableSql } = await import('../../../src/index.ts')
    const schema = `s_${Math.random().toString(36).slice(2, 8)}`
    const custom = `${schema}.Leases$1`
    await pool.query(`CREATE SCHEMA "${schema}"`)
    try {
      await pool.query(createTableSql(custom))
      const jobName = nextJob()
      const first = await withCronLease(pool, jobName, 200, (ctx) => ctx.renew(300), { table: custom, holder: 'a' })
      assert.deepEqual(first, { ran: true, result: true })
      assert.equal((await withCronLease(pool, jobName, 200, () => 1, { table: custom })).ran, false)
      await sleep(400)
      assert.equal((await withCronLease(pool, jobName, 200, () => 1, { table: custom, holder: 'b' })).ran, true)
      const { rows } = await pool.query(`SELECT holder FROM "${schema}"."Leases$1"`)
      assert.deepEqual(rows, [{ holder: 'b' }])
    } finally {
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`)
    }
  })
})
