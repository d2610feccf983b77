/**
 * In a caller's transaction the library's statements go one at a time per connection: each is sent
 * after the one before it settles (pg 8.23 warns when its query queue is used, pg 9 removes it),
 * and two handle objects over one connection (an adapter made per call) never interleave their
 * savepoints, whose RELEASE would then release the other's and abort the transaction.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import knexFactory, { type Knex } from 'knex'
import type pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { listLeases, quoteTable, withCronLease } from '../../../src/index.ts'
import { holdClaim } from '../../helpers/held-claim.ts'
import { fromKnex } from '../../helpers/recipes.ts'

// Node prints each deprecation once per process; this file's process sees every one from its start.
const deprecations: string[] = []
process.on('warning', (warning) => {
  if (warning.name === 'DeprecationWarning') deprecations.push(warning.message)
})

let pool: pg.Pool
let table: string
let jobs = 0
const nextJob = () => `one-at-a-time-${++jobs}`
const quiet = { warn() {}, debug() {} }

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'one_at_a_time')
})
after(async () => {
  await pool.end()
})

/**
 * The client behind a wrapper that reports its state, and how many of the statements sent through
 * it were unsettled at once, at most.
 */
function counted(client: pg.PoolClient) {
  let inFlight = 0
  const seen = { most: 0, texts: [] as string[] }
  const handle = {
    query: (text: string, params?: unknown[]) => {
      inFlight++
      seen.most = Math.max(seen.most, inFlight)
      seen.texts.push(text)
      return client.query(text, params).finally(() => {
        inFlight--
      })
    },
    getTransactionStatus: () => (client as unknown as { getTransactionStatus(): string }).getTransactionStatus(),
  }
  return { handle, seen }
}

describe('each statement is sent after the one before it settles', { timeout: 30_000 }, () => {
  test('claims that succeed and fail, a renew, a listing and a fence in a transaction: never two at once, and no DeprecationWarning', async () => {
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      const { handle, seen } = counted(client)
      const outcome = await withCronLease(
        handle,
        nextJob(),
        60_000,
        async (ctx) => {
          assert.equal(await ctx.renew(30_000), true)
          await ctx.fence(handle)
          return (await listLeases(handle, { table })).length
        },
        { table, logger: quiet },
      )
      assert.equal(outcome.ran, true)
      // A failing statement: the rollback to its savepoint, and the release, each wait their turn.
      await assert.rejects(
        withCronLease(handle, nextJob(), 60_000, () => {}, { table: 'no_such_table_here' }),
        {
          code: '42P01',
        },
      )
      await assert.rejects(listLeases(handle, { table: 'no_such_table_here' }))
      assert.deepEqual((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the transaction is whole')
      await client.query('COMMIT')
      assert.ok(
        seen.texts.some((text) => text.startsWith('ROLLBACK TO SAVEPOINT')),
        'a statement failed and was undone',
      )
      assert.equal(seen.most, 1, 'at most one statement of the library unsettled at a time')
    } finally {
      client.release()
    }
    assert.deepEqual(deprecations, [])
  })
})

describe('two handle objects over one connection', { timeout: 30_000 }, () => {
  let knex: Knex
  before(async () => {
    knex = knexFactory({ client: 'pg', connection: await testDatabaseUrl(), pool: { min: 0, max: 2 } })
  })
  after(async () => {
    await knex.destroy()
  })

  test('two fences in flight at once, each through its own fromKnex(trx): both hold, and the transaction commits', async () => {
    const jobName = nextJob()
    const held = await holdClaim(pool, jobName, 60_000, { table, logger: quiet })
    try {
      await knex.transaction(async (trx) => {
        // An adapter made per call, as a tick written against Knex would.
        await Promise.all([held.ctx.fence(fromKnex(trx)), held.ctx.fence(fromKnex(trx))])
        const { rows } = await trx.raw('SELECT 1 AS one')
        assert.deepEqual(rows, [{ one: 1 }], 'the transaction is whole')
        // The fences' row lock is held: a rival's claim of the expired lease skips the row.
        await pool.query(`UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() WHERE job_name = $1`, [
          jobName,
        ])
        const rival = await withCronLease(pool, jobName, 60_000, () => 'rival', { table, logger: quiet })
        assert.equal(rival.ran, false)
      })
    } finally {
      held.release()
      await held.outcome
    }
  })

  test('a fence that fails beside one that holds: the failure is undone, the other keeps its lock, and the transaction commits', async () => {
    const free = nextJob()
    const locked = nextJob()
    const a = await holdClaim(pool, free, 60_000, { table, logger: quiet })
    const b = await holdClaim(pool, locked, 60_000, { table, logger: quiet })
    // A rival transaction holds the second job's row, so its fence meets the lock timeout.
    const rival = await pool.connect()
    try {
      await rival.query('BEGIN')
      await rival.query(`SELECT 1 FROM ${quoteTable(table)} WHERE job_name = $1 FOR UPDATE`, [locked])
      await knex.transaction(async (trx) => {
        await trx.raw(`SET LOCAL lock_timeout = '200ms'`)
        const [held, timedOut] = await Promise.allSettled([a.ctx.fence(fromKnex(trx)), b.ctx.fence(fromKnex(trx))])
        assert.equal(held.status, 'fulfilled')
        assert.equal(timedOut.status, 'rejected')
        assert.equal((timedOut as PromiseRejectedResult).reason?.code, '55P03')
        // The fence that held still holds: another session cannot lock the row for update.
        await assert.rejects(
          pool.query(`SELECT 1 FROM ${quoteTable(table)} WHERE job_name = $1 FOR UPDATE NOWAIT`, [free]),
          { code: '55P03' },
        )
        const { rows } = await trx.raw('SELECT 1 AS one')
        assert.deepEqual(rows, [{ one: 1 }], 'the transaction is whole')
      })
    } finally {
      await rival.query('ROLLBACK')
      rival.release()
      a.release()
      b.release()
      await Promise.all([a.outcome, b.outcome])
    }
  })
})

describe('a connection is asked which it is in its turn', { timeout: 30_000 }, () => {
  test('four handle objects over one client in a transaction, first used at once: their probes and statements go one at a time', async () => {
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      // Four objects, one connection, and one count of what is in flight on it.
      const { handle, seen } = counted(client)
      const handles = Array.from({ length: 4 }, () => ({
        query: handle.query,
        getTransactionStatus: handle.getTransactionStatus,
      }))
      const listed = await Promise.all(handles.map((h) => listLeases(h, { table })))
      assert.equal(listed.length, 4)
      assert.equal(seen.most, 1, 'never two statements at once on the connection')
      const probes = seen.texts.filter((text) => text.includes('pg_backend_pid()'))
      assert.equal(probes.length, 4, 'each handle object asked once')
      await client.query('COMMIT')
    } finally {
      client.release()
    }
  })
})

describe('the whole file', () => {
  test('printed no DeprecationWarning (pg 8.23 prints one when its query queue is used)', () => {
    assert.deepEqual(deprecations, [])
  })
})
