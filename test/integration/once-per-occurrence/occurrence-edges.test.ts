/**
 * The edges of occurrence keys that a straight run does not reach: a catch-up against a fenced
 * transaction, the occurrence a catch-up runs when the replica that stored the due time had a fast
 * clock, a due time left behind by a claim that named none, half intervals in the missed count,
 * and one process reaching two tables of one name with different shapes.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { catchUp, listLeases, quoteTable, withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
let table: string
before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'occ_edges')
})
after(() => pool.end())

const MINUTE = 60_000
const quiet = { warn() {}, debug() {} }
let jobs = 0
const nextJob = () => `edge-${++jobs}`
const slotNow = (every: number) => Math.floor(Date.now() / every) * every

/** Makes the job's row read as due `dueAgoMs` ago, with the slot that due time stands for. */
async function dueSince(jobName: string, dueAgoMs: number, slot: number, everyMs: number, skewMs = 0) {
  await pool.query(
    `UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() - interval '1 hour',
       claimed_at = clock_timestamp() - interval '2 hours', every_ms = $2,
       next_due_at = clock_timestamp() - $3 * interval '1 millisecond', next_occurrence = to_timestamp($4::float8 / 1000),
       last_occurrence = to_timestamp($4::float8 / 1000) - $2 * interval '1 millisecond'
     WHERE job_name = $1`,
    [jobName, everyMs, dueAgoMs + skewMs, slot],
  )
}

describe('catch-up keeps to the claim rules', () => {
  test('a catch-up loses while another claim fences its transaction on the row', async () => {
    const jobName = nextJob()
    const slot = slotNow(MINUTE)
    assert.equal((await withCronLease(pool, jobName, 1000, () => 1, { table, occurrence: new Date(slot) })).ran, true)
    await dueSince(jobName, 5_000, slot + MINUTE, MINUTE)
    // A claim of the row's token fences it, as ctx.fence does, in a transaction held open.
    const { rows } = await pool.query(
      `SELECT to_char(claimed_at AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS token FROM ${quoteTable(table)} WHERE job_name = $1`,
      [jobName],
    )
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      await client.query(`SELECT 1 FROM ${quoteTable(table)} WHERE job_name = $1 FOR KEY SHARE`, [jobName])
      const during = await catchUp(pool, jobName, 1000, () => 'caught up', { table, withinMs: MINUTE, everyMs: MINUTE })
      assert.deepEqual(during, { ran: false, result: null }, 'the fenced row is skipped, not taken')
      await client.query('COMMIT')
    } finally {
      client.release()
    }
    assert.ok(rows[0].token)
    const afterwards = await catchUp(pool, jobName, 1000, () => 'caught up', {
      table,
      withinMs: MINUTE,
      everyMs: MINUTE,
    })
    assert.deepEqual(afterwards, { ran: true, result: 'caught up' })
  })

  test("the caught-up occurrence is the schedule's slot, so a late replica presenting it finds it run", async () => {
    const jobName = nextJob()
    const every = 10_000
    const slot = slotNow(every)
    assert.equal(
      (await withCronLease(pool, jobName, 1000, () => 1, { table, occurrence: new Date(slot - 3 * every) })).ran,
      true,
    )
    // The replica that stored the due time ran 300 ms fast: the due time is 300 ms before the slot.
    await dueSince(jobName, 2 * every + 1_000, slot - 2 * every, every, 300)
    const seen: [string | undefined, number][] = []
    const outcome = await catchUp(
      pool,
      jobName,
      500,
      (ctx) => void seen.push([ctx.occurrence?.toISOString(), ctx.missed]),
      {
        table,
        withinMs: MINUTE,
        everyMs: every,
      },
    )
    assert.equal(outcome.ran, true)
    assert.deepEqual(seen, [[new Date(slot).toISOString(), 2]], 'the latest slot due, after two missed')
    await expireLease(pool, table, jobName)
    const late = await withCronLease(pool, jobName, 500, () => 'ran twice', {
      table,
      logger: quiet,
      occurrence: new Date(slot),
    })
    assert.deepEqual(late, { ran: false, result: null })
  })

  test("a catch-up records the interval it stepped by, not the outage, as the job's", async () => {
    const jobName = nextJob()
    const every = 10_000
    const slot = slotNow(every)
    await withCronLease(pool, jobName, 1000, () => 1, { table, occurrence: new Date(slot - 6 * every) })
    await dueSince(jobName, 3 * every + 500, slot - 3 * every, every)
    // Without everyMs: the table's every_ms is the step, and stays the job's interval.
    assert.equal((await catchUp(pool, jobName, 500, () => 1, { table, withinMs: MINUTE })).ran, true)
    const lease = (await listLeases(pool, { table })).find((l) => l.jobName === jobName)!
    assert.deepEqual(
      [lease.everyMs, lease.lastOccurrence?.slice(0, 23)],
      [every, new Date(slot).toISOString().slice(0, 23)],
    )
  })

  test('a due time left behind by a later claim that named none is not a missed occurrence', async () => {
    const jobName = nextJob()
    const slot = slotNow(MINUTE)
    const nextOccurrence = new Date(Date.now() + 200)
    await withCronLease(pool, jobName, 100, () => 1, { table, occurrence: new Date(slot), nextOccurrence })
    await new Promise((resolve) => setTimeout(resolve, 400))
    // A lease-only claim wins after the due time and stores none.
    assert.equal((await withCronLease(pool, jobName, 100, () => 1, { table })).ran, true)
    await new Promise((resolve) => setTimeout(resolve, 200))
    const lease = (await listLeases(pool, { table, overdueGraceMs: 1 })).find((l) => l.jobName === jobName)!
    assert.equal(lease.overdue, false, 'the interval rule judges it, and the interval is unknown')
    const caught = await catchUp(pool, jobName, 100, () => 'ran', { table, withinMs: MINUTE })
    assert.deepEqual(caught, { ran: false, result: null })
  })
})

describe('missed counting', () => {
  test('half an interval late counts one more, never rounds to even', async () => {
    for (const [late, expected] of [
      [0.4, 0],
      [0.5, 1],
      [1.5, 2],
      [2.5, 3],
    ] as const) {
      const jobName = nextJob()
      const every = 1_000_000
      const slot = Date.UTC(2026, 0, 1)
      await withCronLease(pool, jobName, 100, () => 1, { table, occurrence: new Date(slot) })
      await pool.query(
        `UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() - interval '1 second',
           next_due_at = to_timestamp($2::float8 / 1000) WHERE job_name = $1`,
        [jobName, slot + every],
      )
      const missed: number[] = []
      const occurrence = new Date(slot + every + late * every)
      await withCronLease(pool, jobName, 100, (ctx) => void missed.push(ctx.missed), {
        table,
        occurrence,
        everyMs: every,
      })
      assert.deepEqual(missed, [expected], `${late} intervals late`)
    }
  })
})

describe('what a process knows of a table is kept per handle', () => {
  test('two schemas whose tables share a name, one upgraded and one not: both claim; a handle moved between them fails one claim, then reads the shape again', async () => {
    const suffix = randomBytes(4).toString('hex')
    const [upgraded, original] = [`occ_new_${suffix}`, `occ_old_${suffix}`]
    await pool.query(`CREATE SCHEMA ${upgraded}; CREATE SCHEMA ${original}`)
    const url = await testDatabaseUrl()
    const onPath = (schema: string) =>
      testPool({ connectionString: url, max: 2, options: `-c search_path=${schema}` } as pg.PoolConfig)
    const [a, b] = await Promise.all([onPath(upgraded), onPath(original)])
    try {
      const { createTableSql } = await import('../../../src/index.ts')
      await a.query(createTableSql('leases'))
      await b.query(
        'CREATE TABLE leases (job_name text PRIMARY KEY, lease_until timestamptz NOT NULL, holder text, claimed_at timestamptz NOT NULL DEFAULT clock_timestamp())',
      )
      const opts = (at: number) => ({ table: 'leases', logger: quiet, occurrence: new Date(at) })
      const slot = slotNow(MINUTE)
      for (let i = 0; i < 3; i++) {
        assert.equal((await withCronLease(a, 'job', 1, () => 1, opts(slot - (3 - i) * MINUTE))).ran, true)
        await new Promise((resolve) => setTimeout(resolve, 5))
        assert.equal((await withCronLease(b, 'job', 1, () => 1, opts(slot - (3 - i) * MINUTE))).ran, true)
        await new Promise((resolve) => setTimeout(resolve, 5))
      }
      // One connection, so the handle that knows the upgraded table then meets the other one by
      // the same name: that claim names a column the other schema's table lacks and fails, loudly, with
      // nothing run (a miss, never a guess); the next claim reads the shape again and runs.
      const moved = await testPool({
        connectionString: url,
        max: 1,
        options: `-c search_path=${upgraded}`,
      } as pg.PoolConfig)
      try {
        assert.equal((await withCronLease(moved, 'job2', 1, () => 1, opts(slot - 2 * MINUTE))).ran, true)
        await moved.query(`SET search_path = ${original}`)
        await new Promise((resolve) => setTimeout(resolve, 5))
        let ran = 0
        await assert.rejects(
          withCronLease(moved, 'job2', 1, () => ran++, opts(slot - MINUTE)),
          (error: { code?: string }) => error.code === '42703',
        )
        assert.equal(ran, 0, 'the failed claim ran nothing')
        assert.equal((await withCronLease(moved, 'job2', 1, () => 1, opts(slot - MINUTE))).ran, true)
      } finally {
        await moved.end()
      }
    } finally {
      await Promise.all([a.end(), b.end()])
      await pool.query(`DROP SCHEMA ${upgraded} CASCADE; DROP SCHEMA ${original} CASCADE`)
    }
  })
})
