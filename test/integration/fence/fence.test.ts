/**
 * ctx.fence(client) on real Postgres: a fenced transaction against takeovers racing it (this
 * package's claim, and the original package's plain upsert), a stale claim's fence, the fence
 * against the claim's own renew and keep-alive, a lease that ran out with no other claim since,
 * and the handles it refuses.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import diagnostics from 'node:diagnostics_channel'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { withCronLease as originalWithCronLease } from 'pg-cron-lease-original'
import { plainUpsertSql } from '../../../dev/peers.ts'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import {
  CHANNELS,
  type LeaseContext,
  LeaseLostError,
  type LeaseOptions,
  quoteTable,
  type RenewMessage,
  releaseLease,
  withCronLease,
} from '../../../src/index.ts'
import { holdClaim } from '../../helpers/held-claim.ts'

let pool: pg.Pool
let table: string
let reports: string
let job = 0
const nextJob = () => `fence-${++job}`
const LEASE_MS = 60_000
/** Every test's bound: a lock that made something wait for good fails the test instead of hanging it. */
const BOUND = { timeout: 30_000 }

before(async () => {
  pool = await testPool({ max: 20 })
  table = await freshTable(pool, 'fence')
  reports = `fence_reports_${randomBytes(5).toString('hex')}`
  await pool.query(`CREATE TABLE ${reports} (job_name text, written_by text)`)
})
after(async () => {
  await pool.query(`DROP TABLE ${reports}`)
  await pool.end()
})

/** Holds a claim of a fresh job on this test's table; its tick runs until released. */
const hold = (jobName: string, opts: LeaseOptions = {}, leaseMs = LEASE_MS) =>
  holdClaim(pool, jobName, leaseMs, { table, holder: 'fenced', ...opts })

/** A transaction of its own, on a client checked out of the pool. */
async function begin(): Promise<pg.PoolClient> {
  const client = await pool.connect()
  await client.query('BEGIN')
  return client
}

/** Ends the transaction and returns the client to the pool. */
async function end(client: pg.PoolClient, how: 'COMMIT' | 'ROLLBACK') {
  try {
    await client.query(how)
  } finally {
    client.release()
  }
}

const writeReport = (client: pg.PoolClient, jobName: string) =>
  client.query(`INSERT INTO ${reports} (job_name, written_by) VALUES ($1, 'fenced')`, [jobName])

const reportsOf = async (jobName: string) =>
  Number((await pool.query(`SELECT count(*) AS n FROM ${reports} WHERE job_name = $1`, [jobName])).rows[0].n)

/** A rival replica on this package claims: whether its tick ran. */
const rivalRuns = async (jobName: string) =>
  (await withCronLease(pool, jobName, LEASE_MS, () => {}, { table, holder: 'rival' })).ran

const recordedAt = async (jobName: string) =>
  (await pool.query(`SELECT last_finished_at FROM ${quoteTable(table)} WHERE job_name = $1`, [jobName])).rows[0]
    ?.last_finished_at ?? null

const rowOf = async (jobName: string) =>
  (
    await pool.query(
      `SELECT holder, claimed_at, extract(epoch FROM lease_until - clock_timestamp()) * 1000 AS left_ms
       FROM ${quoteTable(table)} WHERE job_name = $1`,
      [jobName],
    )
  ).rows[0] as { holder: string; claimed_at: Date; left_ms: number }

/** How `promise` settled within `ms`: its value, its error, or 'pending'. */
async function within<T>(promise: Promise<T>, ms: number) {
  let timer: NodeJS.Timeout | undefined
  const pending = new Promise<{ state: 'pending' }>((resolve) => {
    timer = setTimeout(() => resolve({ state: 'pending' }), ms)
  })
  try {
    return await Promise.race([
      promise.then(
        (value) => ({ state: 'resolved' as const, value }),
        (error: unknown) => ({ state: 'rejected' as const, error }),
      ),
      pending,
    ])
  } finally {
    clearTimeout(timer)
  }
}

const isLeaseLost = (ctx: LeaseContext) => (error: unknown) => {
  assert.ok(error instanceof LeaseLostError, String(error))
  assert.ok(error instanceof Error)
  assert.equal(error.code, 'PG_CRON_LEASE_LOST')
  assert.equal(error.name, 'LeaseLostError')
  assert.equal(error.jobName, ctx.jobName)
  assert.equal(error.claimToken, ctx.claimToken)
  assert.match(error.message, /was lost: another claim has replaced claim .*roll the transaction back/)
  return true
}

describe('a takeover racing a fenced transaction never wins before it ends', BOUND, () => {
  test("after the lease ran out, this package's rival claims lose at once while the fenced transaction is open, and win once it commits", async () => {
    const jobName = nextJob()
    const held = await hold(jobName)
    const client = await begin()
    try {
      await held.ctx.fence(client)
      await writeReport(client, jobName)
      // The expiry is an UPDATE of the row, as a renew is: the fence does not hold it up.
      assert.equal((await within(expireLease(pool, table, jobName), 1000)).state, 'resolved')
      for (let i = 0; i < 3; i++) {
        const started = performance.now()
        assert.equal(await rivalRuns(jobName), false, `rival claim ${i} won while the fence was held`)
        assert.ok(performance.now() - started < 1000, 'the rival claim waited for the fence instead of losing')
      }
      await end(client, 'COMMIT')
    } catch (error) {
      await end(client, 'ROLLBACK')
      throw error
    }
    assert.equal(await reportsOf(jobName), 1)
    assert.equal(await rivalRuns(jobName), true, 'the rival claim lost after the commit')
    held.release()
    await held.outcome
  })

  test('30 rounds of a fence and a rival claim sent at the same moment on an expired lease: exactly one of them succeeds, and a fenced write commits only when the rival lost', async (t) => {
    const tallies = { fenced: 0, rival: 0 }
    for (let round = 0; round < 30; round++) {
      const jobName = nextJob()
      const held = await hold(jobName)
      await expireLease(pool, table, jobName)
      const client = await begin()
      const rival = rivalRuns(jobName)
      let fenced = false
      try {
        await held.ctx.fence(client)
        fenced = true
        await writeReport(client, jobName)
        // The transaction stays open until the rival has answered, so a rival win now would be
        // a win while the fence is held.
        assert.equal(await rival, false, `round ${round}: the rival won while the fence was held`)
        await end(client, 'COMMIT')
      } catch (error) {
        await end(client, 'ROLLBACK')
        if (fenced || !(error instanceof LeaseLostError)) throw error
        assert.equal(await rival, true, `round ${round}: the fence was refused, yet the rival did not win`)
      }
      assert.equal(await reportsOf(jobName), fenced ? 1 : 0, `round ${round}`)
      tallies[fenced ? 'fenced' : 'rival']++
      held.release()
      await held.outcome
    }
    t.diagnostic(`the fence first in ${tallies.fenced} rounds, the rival in ${tallies.rival}`)
  })

  test("the original package's claim loses while the fenced claim's lease holds, and the fenced transaction commits as this claim's", async () => {
    const jobName = nextJob()
    const held = await hold(jobName, { keepAlive: { beatMs: 50, extendMs: 1000 } }, 1000)
    const client = await begin()
    try {
      await held.ctx.fence(client)
      await writeReport(client, jobName)
      // Past the claim's first lease: only the keep-alive beats, going on under the fence, hold it.
      await sleep(1200)
      const original = originalWithCronLease(pool, jobName, LEASE_MS, () => {}, { table, holder: 'original' })
      assert.deepEqual(await within(original, 2000), { state: 'resolved', value: { ran: false, result: null } })
      const upsert = await within(pool.query(plainUpsertSql(table), [jobName, LEASE_MS, 'original']), 2000)
      assert.equal(upsert.state === 'resolved' && upsert.value.rowCount, 0, upsert.state)
      await end(client, 'COMMIT')
    } catch (error) {
      await end(client, 'ROLLBACK')
      throw error
    }
    assert.equal(await reportsOf(jobName), 1)
    assert.equal((await rowOf(jobName)).holder, 'fenced')
    assert.equal(held.ctx.signal.aborted, false)
    held.release()
    await held.outcome
  })

  test("once the lease has run out, the original package's plain upsert is not held off by the fence: in a mixed fleet only the lease keeps it out", async () => {
    const jobName = nextJob()
    const held = await hold(jobName)
    const client = await begin()
    try {
      await held.ctx.fence(client)
      await expireLease(pool, table, jobName)
      // Its ON CONFLICT DO UPDATE changes no key column, so it locks the row FOR NO KEY UPDATE,
      // which FOR KEY SHARE lets through: it does not wait, and it wins.
      const upsert = await within(pool.query(plainUpsertSql(table), [jobName, LEASE_MS, 'original']), 2000)
      assert.equal(upsert.state, 'resolved')
      assert.equal(upsert.state === 'resolved' && upsert.value.rowCount, 1)
      assert.equal((await rowOf(jobName)).holder, 'original')
    } finally {
      await end(client, 'ROLLBACK')
    }
    held.release()
    await held.outcome
  })
})

describe("with claimed_at in a unique index, the original package's upsert waits for the fence", BOUND, () => {
  test('on a table with a unique index on (job_name, claimed_at), the upsert of a lease that ran out waits until the fenced transaction commits, and only then wins; renews still answer at once', async () => {
    const indexed = await freshTable(pool, 'fence_indexed')
    await pool.query(`CREATE UNIQUE INDEX ON ${quoteTable(indexed)} (job_name, claimed_at)`)
    const jobName = nextJob()
    const held = await holdClaim(pool, jobName, LEASE_MS, { table: indexed, holder: 'fenced' })
    const client = await begin()
    let original: Promise<{ ran: boolean }> | undefined
    try {
      await held.ctx.fence(client)
      await writeReport(client, jobName)
      assert.deepEqual(await within(held.ctx.renew(), 1000), { state: 'resolved', value: true })
      await expireLease(pool, indexed, jobName)
      original = originalWithCronLease(pool, jobName, LEASE_MS, () => {}, { table: indexed, holder: 'original' })
      assert.equal((await within(original, 500)).state, 'pending')
      await end(client, 'COMMIT')
    } catch (error) {
      await end(client, 'ROLLBACK')
      throw error
    }
    assert.equal((await original).ran, true)
    assert.equal(await reportsOf(jobName), 1)
    held.release()
    await held.outcome
    await pool.query(`DROP TABLE ${quoteTable(indexed)}`)
  })
})

describe('a stale claim never commits', BOUND, () => {
  test('after another claim replaced this one, fence(client) rejects with LeaseLostError, the signal aborts, and the rollback leaves nothing written', async () => {
    const jobName = nextJob()
    const held = await hold(jobName)
    await expireLease(pool, table, jobName)
    assert.equal(await rivalRuns(jobName), true)
    const rivalRow = await rowOf(jobName)

    const client = await begin()
    try {
      await writeReport(client, jobName)
      await assert.rejects(held.ctx.fence(client), isLeaseLost(held.ctx))
      // Under the fence's own savepoint: the caller's transaction is not aborted by the refusal.
      assert.equal((await client.query('SELECT 1 AS ok')).rows[0].ok, 1)
    } finally {
      await end(client, 'ROLLBACK')
    }
    assert.equal(held.ctx.signal.aborted, true)
    assert.match(String(held.ctx.signal.reason), /was lost: another claim replaced it/)
    assert.equal(await reportsOf(jobName), 0)
    const after = await rowOf(jobName)
    assert.equal(after.holder, 'rival')
    assert.deepEqual(after.claimed_at, rivalRow.claimed_at)
    held.release()
    await held.outcome
  })

  test('a claim replaced while its fenced transaction waits on the row lock is refused once that claim commits', async () => {
    const jobName = nextJob()
    const held = await hold(jobName)
    await expireLease(pool, table, jobName)
    // A rival claim made in its own transaction holds the row FOR UPDATE until it commits.
    const rivalClient = await begin()
    const rival = await withCronLease(rivalClient, jobName, LEASE_MS, () => {}, { table, holder: 'rival' })
    assert.equal(rival.ran, true)
    const client = await begin()
    try {
      const fence = held.ctx.fence(client)
      assert.equal((await within(fence, 300)).state, 'pending')
      await end(rivalClient, 'COMMIT')
      await assert.rejects(fence, isLeaseLost(held.ctx))
    } finally {
      await end(client, 'ROLLBACK')
    }
    held.release()
    await held.outcome
  })
})

describe("the fence never holds up its own claim's renew and keep-alive", BOUND, () => {
  test('with keep-alive every 50 ms, the beats and ctx.renew() succeed without waiting while the fence is held, and the transaction then commits', async () => {
    const jobName = nextJob()
    const beats: RenewMessage[] = []
    const onRenew = (message: unknown) => {
      if ((message as RenewMessage).jobName === jobName) beats.push(message as RenewMessage)
    }
    diagnostics.subscribe(CHANNELS.renew, onRenew)
    try {
      const held = await hold(jobName, { keepAlive: { beatMs: 50, extendMs: 2000 } }, 2000)
      const client = await begin()
      try {
        await held.ctx.fence(client)
        await writeReport(client, jobName)
        const beatsBefore = beats.length
        await sleep(600)
        const beatsDuring = beats.slice(beatsBefore)
        assert.ok(beatsDuring.length >= 5, `${beatsDuring.length} beats in 600 ms under the fence`)
        assert.ok(
          beatsDuring.every((beat) => beat.renewed),
          JSON.stringify(beatsDuring),
        )
        for (let i = 0; i < 3; i++) {
          const started = performance.now()
          const renewed = await within(held.ctx.renew(1500), 1000)
          assert.deepEqual(renewed, { state: 'resolved', value: true }, `renew ${i}`)
          assert.ok(performance.now() - started < 1000)
        }
        // Fencing again from the same transaction is allowed, and holds nothing up either.
        await held.ctx.fence(client)
        await end(client, 'COMMIT')
      } catch (error) {
        await end(client, 'ROLLBACK')
        throw error
      }
      assert.equal(await reportsOf(jobName), 1)
      assert.equal(held.ctx.signal.aborted, false)
      const row = await rowOf(jobName)
      assert.equal(row.holder, 'fenced')
      assert.ok(row.left_ms > 1000, `${row.left_ms} ms left`)
      held.release()
      await held.outcome
    } finally {
      diagnostics.unsubscribe(CHANNELS.renew, onRenew)
    }
  })

  test('a lease the beats extended while the fence was held keeps the fence: a rival claim after it ran out still loses', async () => {
    const jobName = nextJob()
    const held = await hold(jobName, { keepAlive: { beatMs: 50, extendMs: 2000 } }, 2000)
    const client = await begin()
    try {
      await held.ctx.fence(client)
      await sleep(300)
      assert.deepEqual(await within(held.ctx.renew(), 1000), { state: 'resolved', value: true })
      // Every beat and renew wrote a new version of the row; the lock carries over to each.
      held.release()
      await held.outcome
      await expireLease(pool, table, jobName)
      assert.equal(await rivalRuns(jobName), false)
      await end(client, 'COMMIT')
    } catch (error) {
      await end(client, 'ROLLBACK')
      throw error
    }
    // The job's first record reads the row FOR UPDATE, so it waited on the fence and lands as it
    // commits: a rival sent while it holds the row skips it (SKIP LOCKED) and misses this once.
    for (let i = 0; i < 200 && (await recordedAt(jobName)) === null; i++) await sleep(10)
    assert.equal(await rivalRuns(jobName), true)
  })
})

describe("a lease that ran out with no other claim since is still this claim's to fence", BOUND, () => {
  for (const [how, endLease] of [
    ['expired', (jobName: string) => expireLease(pool, table, jobName)],
    ['released', (jobName: string) => releaseLease(pool, jobName, { table }).then(() => {})],
  ] as const) {
    test(`a lease that ${how}: fence(client) resolves, the write commits, and no claim wins before the commit`, async () => {
      const jobName = nextJob()
      const held = await hold(jobName)
      await endLease(jobName)
      assert.ok((await rowOf(jobName)).left_ms <= 0)
      const client = await begin()
      try {
        await held.ctx.fence(client)
        await writeReport(client, jobName)
        assert.equal(await rivalRuns(jobName), false)
        await end(client, 'COMMIT')
      } catch (error) {
        await end(client, 'ROLLBACK')
        throw error
      }
      assert.equal(await reportsOf(jobName), 1)
      assert.equal(held.ctx.signal.aborted, false)
      held.release()
      await held.outcome
    })
  }
})

describe('what fence(client) refuses, before sending anything', BOUND, () => {
  /** A handle that counts what is sent through it. */
  const counting = (client: pg.PoolClient) => {
    const sent: string[] = []
    const handle = {
      query: (text: string, params: unknown[]) => {
        sent.push(text)
        return client.query(text, params)
      },
      getTransactionStatus: () => (client as unknown as { getTransactionStatus(): string }).getTransactionStatus(),
    }
    return { handle, sent }
  }

  test('a client that is not a queryable, a pg Pool, or a pg client outside a transaction: a TypeError naming client', async () => {
    const held = await hold(nextJob())
    try {
      for (const bad of [undefined, null, {}, 'client', { query: 'SELECT 1' }]) {
        await assert.rejects(
          held.ctx.fence(bad as never),
          (error: unknown) => error instanceof TypeError && /client must be/.test(error.message),
        )
      }
      await assert.rejects(
        held.ctx.fence(pool),
        /fence\(client\) needs the client of an open transaction, got a pg Pool/,
      )
      const idle = await pool.connect()
      try {
        await assert.rejects(held.ctx.fence(idle), (error: unknown) => {
          assert.ok(error instanceof TypeError)
          assert.match(error.message, /fence\(client\) needs a client with a transaction open, got a pg client outside/)
          return true
        })
      } finally {
        idle.release()
      }
      assert.equal(held.ctx.signal.aborted, false)
    } finally {
      held.release()
      await held.outcome
    }
  })

  test('a context whose tick has settled: an Error, and nothing is sent', async () => {
    let kept: LeaseContext | undefined
    await withCronLease(
      pool,
      nextJob(),
      LEASE_MS,
      (ctx) => {
        kept = ctx
      },
      { table },
    )
    const client = await begin()
    try {
      const { handle, sent } = counting(client)
      await assert.rejects(kept!.fence(handle), (error: unknown) => {
        assert.ok(error instanceof Error && !(error instanceof TypeError))
        assert.match(error.message, /cannot fence on the lease for 'fence-\d+': its tick has settled/)
        return true
      })
      assert.deepEqual(sent, [])
    } finally {
      await end(client, 'ROLLBACK')
    }
  })

  test('a claim whose result carried no token (a driver reporting only rowCount): a TypeError, and nothing is sent', async () => {
    const countOnly = {
      query: async (text: string, params: unknown[]) => ({ rowCount: (await pool.query(text, params)).rowCount }),
    }
    const client = await begin()
    try {
      const { handle, sent } = counting(client)
      const outcome = await withCronLease(
        countOnly,
        nextJob(),
        LEASE_MS,
        async (ctx) => {
          assert.equal(ctx.claimToken, null)
          await assert.rejects(ctx.fence(handle), (error: unknown) => {
            assert.ok(error instanceof TypeError)
            assert.match(error.message, /cannot fence on the lease for 'fence-\d+': the claim's result had no row/)
            return true
          })
        },
        { table, record: false },
      )
      assert.equal(outcome.ran, true)
      assert.deepEqual(sent, [])
    } finally {
      await end(client, 'ROLLBACK')
    }
  })
})

describe('a fence outside any transaction is refused by the statement itself, for any handle', BOUND, () => {
  test('an adapter over the pool (a Knex- or Drizzle-style query function outside a transaction): a TypeError, nothing locked', async () => {
    const held = await hold(nextJob())
    try {
      const adapter = { query: (text: string, params: unknown[]) => pool.query(text, params) }
      await assert.rejects(held.ctx.fence(adapter), (error: unknown) => {
        assert.ok(error instanceof TypeError)
        assert.match(error.message, /fence\(client\) for 'fence-\d+' ran outside any transaction.*nothing was locked/)
        return true
      })
      assert.equal(held.ctx.signal.aborted, false, 'the claim itself is not lost')
    } finally {
      held.release()
      await held.outcome
    }
  })

  test('the same adapter over a client inside BEGIN fences, and a rival claim loses until it commits', async () => {
    const jobName = nextJob()
    const held = await hold(jobName, {}, 300)
    const client = await begin()
    try {
      await held.ctx.fence({ query: (text: string, params: unknown[]) => client.query(text, params) })
      await new Promise((resolve) => setTimeout(resolve, 350))
      const rival = await withCronLease(pool, jobName, LEASE_MS, () => 'rival', { table })
      assert.equal(rival.ran, false, 'the fence holds the row while the transaction is open')
    } finally {
      await end(client, 'COMMIT')
      held.release()
      await held.outcome
    }
  })
})
