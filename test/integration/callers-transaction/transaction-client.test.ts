/**
 * What a transaction does to a lease claimed through its client: the claim is an ordinary row
 * write, so it follows the transaction. These tests show each caveat the README documents.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { quoteTable, withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
let table: string
let t: string
let jobs = 0
const nextJob = () => `tx-job-${++jobs}`

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'txc')
  t = quoteTable(table)
})
after(async () => {
  await pool.end()
})

/** Runs `body` with a checked-out client, always released. */
async function withClient<T>(body: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect()
  try {
    return await body(client)
  } finally {
    client.release()
  }
}

async function count(jobName: string): Promise<number> {
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${t} WHERE job_name = $1`, [jobName])
  return rows[0].n
}

/**
 * Starts a claim on its own session and resolves once Postgres reports that session waiting on a
 * lock (bounded), so the test knows the claim is blocked rather than merely slow.
 */
async function blockedClaim(jobName: string) {
  const client = await pool.connect()
  const { rows } = await client.query('SELECT pg_backend_pid() AS pid')
  let settled = false
  const outcome = withCronLease(client, jobName, 60_000, () => 'waiter', { table, holder: 'waiter' }).finally(() => {
    settled = true
    client.release()
  })
  let waiting = false
  for (let i = 0; i < 500 && !waiting && !settled; i++) {
    const activity = await pool.query('SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1', [rows[0].pid])
    waiting = activity.rows[0]?.wait_event_type === 'Lock'
    if (!waiting) await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return { outcome, waiting, settled: () => settled }
}

describe('a lease claimed through a transaction client follows the transaction', () => {
  test('the claim is invisible to other sessions until the transaction commits', async () => {
    const job = nextJob()
    await withClient(async (client) => {
      await client.query('BEGIN')
      const outcome = await withCronLease(client, job, 60_000, () => 'ran', { table })
      assert.deepEqual(outcome, { ran: true, result: 'ran' })
      assert.equal(await count(job), 0, 'not visible before COMMIT')
      await client.query('COMMIT')
    })
    assert.equal(await count(job), 1, 'visible after COMMIT')
  })

  /** A job with no row yet, or whose lease has expired. */
  async function claimableJob(existing: boolean) {
    const job = nextJob()
    if (existing) {
      await withCronLease(pool, job, 60_000, () => 0, { table })
      await expireLease(pool, table, job)
    }
    return job
  }

  // A job's first claim is an insert, which a second claimant's insert must wait for. An expired
  // row the transaction has locked is skipped instead (FOR UPDATE SKIP LOCKED): the second claimant
  // loses at once and locks nothing, and if the transaction then rolls back, that occurrence is
  // missed (the next one runs), never run twice.
  test('for a job never claimed before, a second claimant waits on the row lock until the commit, then skips', async () => {
    const job = await claimableJob(false)
    await withClient(async (client) => {
      await client.query('BEGIN')
      assert.equal((await withCronLease(client, job, 60_000, () => 1, { table, holder: 'tx' })).ran, true)
      const waiter = await blockedClaim(job)
      assert.equal(waiter.waiting, true, 'the second claim waits on a lock while the transaction is open')
      assert.equal(waiter.settled(), false)
      await client.query('COMMIT')
      assert.deepEqual(await waiter.outcome, { ran: false, result: null })
    })
    const { rows } = await pool.query(`SELECT holder FROM ${t} WHERE job_name = $1`, [job])
    assert.deepEqual(rows, [{ holder: 'tx' }])
  })

  test('for a job never claimed before, a rolled-back transaction loses its claim and the waiting claimant runs', async () => {
    const job = await claimableJob(false)
    await withClient(async (client) => {
      await client.query('BEGIN')
      assert.equal((await withCronLease(client, job, 60_000, () => 1, { table, holder: 'tx' })).ran, true)
      const waiter = await blockedClaim(job)
      assert.equal(waiter.waiting, true, 'the second claim waits on a lock while the transaction is open')
      await client.query('ROLLBACK')
      assert.deepEqual(await waiter.outcome, { ran: true, result: 'waiter' })
    })
    const { rows } = await pool.query(`SELECT holder FROM ${t} WHERE job_name = $1`, [job])
    assert.deepEqual(rows, [{ holder: 'waiter' }])
  })

  test('for an expired lease, a second claimant loses at once while the transaction is open, without waiting', async () => {
    const job = await claimableJob(true)
    await withClient(async (client) => {
      await client.query('BEGIN')
      assert.equal((await withCronLease(client, job, 60_000, () => 1, { table, holder: 'tx' })).ran, true)
      const second = await blockedClaim(job)
      assert.equal(second.waiting, false, 'it never waited on a lock')
      assert.deepEqual(await second.outcome, { ran: false, result: null })
      await client.query('COMMIT')
    })
    const { rows } = await pool.query(`SELECT holder FROM ${t} WHERE job_name = $1`, [job])
    assert.deepEqual(rows, [{ holder: 'tx' }])
  })

  test('for an expired lease, a rolled-back claim leaves the lease expired: the next claim runs', async () => {
    const job = await claimableJob(true)
    await withClient(async (client) => {
      await client.query('BEGIN')
      assert.equal((await withCronLease(client, job, 60_000, () => 1, { table, holder: 'tx' })).ran, true)
      const second = await blockedClaim(job)
      assert.deepEqual(await second.outcome, { ran: false, result: null }, 'skipped while the claim was in flight')
      await client.query('ROLLBACK')
    })
    assert.deepEqual(await withCronLease(pool, job, 60_000, () => 'next', { table, holder: 'next' }), {
      ran: true,
      result: 'next',
    })
  })

  test('the lease is measured from the claim statement, so a transaction open past it commits an expired lease', async () => {
    const job = nextJob()
    await withClient(async (client) => {
      await client.query('BEGIN')
      assert.equal((await withCronLease(client, job, 200, () => 1, { table, holder: 'slow-tx' })).ran, true)
      // Wait, inside the transaction and by the database clock, until the lease has run out.
      let over = false
      for (let i = 0; i < 200 && !over; i++) {
        const { rows } = await client.query(
          `SELECT lease_until <= clock_timestamp() AS over FROM ${t} WHERE job_name = $1`,
          [job],
        )
        over = rows[0].over
        if (!over) await new Promise((resolve) => setTimeout(resolve, 25))
      }
      assert.equal(over, true, 'the lease ran out while the transaction was open')
      await client.query('COMMIT')
    })
    assert.deepEqual(await withCronLease(pool, job, 60_000, () => 'next', { table }), { ran: true, result: 'next' })
  })
})
