/**
 * Faults on real Postgres: the server stops, a connection dies mid-tick, a claim's reply is lost
 * after the commit, a claim hits statement_timeout, and a SERIALIZABLE transaction races another
 * claimant. Each one must end as a missed occurrence at worst, never a duplicate.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import {
  expireLease,
  freshTable,
  requestedMajor,
  startEmbedded,
  testDatabaseUrl,
  testPool,
} from '../../../dev/postgres.ts'
import { createTableSql, type LeaseContext, quoteTable, withCronLease } from '../../../src/index.ts'
import { holdClaim } from '../../helpers/held-claim.ts'
import { lossyProxy } from '../../helpers/proxy.ts'

let admin: pg.Pool
let table: string
let url: string

before(async () => {
  url = await testDatabaseUrl()
  admin = await testPool({ max: 4 })
  table = await freshTable(admin, 'faults')
})

after(async () => {
  await admin.query(`DROP TABLE IF EXISTS ${quoteTable(table)}`)
  await admin.end()
})

/** The job's row as the database sees it right now. */
async function row(job: string, db: pg.Pool | pg.Client = admin) {
  const { rows } = await db.query(
    `SELECT holder, lease_until > clock_timestamp() AS held,
            to_char(claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS token,
            lease_until::text AS lease_until
       FROM ${quoteTable(table)} WHERE job_name = $1`,
    [job],
  )
  return rows[0] as { holder: string; held: boolean; token: string; lease_until: string } | undefined
}

const expire = (job: string) => expireLease(admin, table, job)

/** Polls `check` every 50 ms until it returns a value, for at most `ms`. */
async function eventually<T>(what: string, check: () => Promise<T | undefined>, ms = 10_000): Promise<T> {
  for (let waited = 0; waited <= ms; waited += 50) {
    const value = await check()
    if (value !== undefined) return value
    await sleep(50)
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`)
}

/** Whether the database orders two timestamps (as text) `a >= b`. */
async function notBefore(a: string, b: string): Promise<boolean> {
  const { rows } = await admin.query('SELECT $1::timestamptz >= $2::timestamptz AS ok', [a, b])
  return rows[0].ok
}

async function connect(options: pg.ClientConfig = {}): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, ...options })
  client.on('error', () => {})
  await client.connect()
  return client
}

/** No test may hang the suite: a fault that never resolves fails the test instead. */
const TIMEOUT = 60_000

/** A driver's error, not one of the library's own. */
function isDriverError(error: unknown): boolean {
  return error instanceof Error && !(error instanceof TypeError) && !error.message.startsWith('pg-cron-lease')
}

describe('Postgres stopped, then restarted: claims reject with the driver error, then the same pool recovers', () => {
  test('while the server is down a claim rejects with the driver error and the tick does not run; after a restart the same pool claims', {
    timeout: TIMEOUT,
  }, async (t) => {
    const server = await startEmbedded(requestedMajor() ?? 18)
    const pool = new pg.Pool({ connectionString: server.url, max: 2, connectionTimeoutMillis: 5000 })
    const idleErrors: unknown[] = []
    pool.on('error', (error) => idleErrors.push(error))
    try {
      await pool.query(createTableSql('leases'))
      // The tick keeps running through the outage, so its context can renew afterwards.
      const held = await holdClaim(pool, 'held', 60_000, { table: 'leases' })

      await server.pause()
      let ticks = 0
      const codes: string[] = []
      for (let attempt = 0; attempt < 3; attempt++) {
        await assert.rejects(
          withCronLease(pool, 'down', 60_000, () => ticks++, { table: 'leases' }),
          (error: Error & { code?: string }) => {
            codes.push(error.code ?? error.message)
            return isDriverError(error)
          },
        )
      }
      assert.equal(ticks, 0, 'no tick runs while the database is unreachable')
      t.diagnostic(`errors while down: ${codes.join(', ')}`)
      // Once the idle connections are gone, a new connection is refused.
      assert.equal(codes.at(-1), 'ECONNREFUSED', `codes seen: ${codes.join(', ')}`)

      await server.resume()
      const afterRestart = await eventually('the restarted server to accept the claim', async () => {
        try {
          return await withCronLease(pool, 'down', 60_000, () => ticks++, { table: 'leases' })
        } catch {
          return undefined
        }
      })
      assert.deepEqual(afterRestart, { ran: true, result: 0 })
      assert.equal(ticks, 1)
      // The lease taken before the shutdown is in the table, still held, and still its claim's.
      assert.equal((await withCronLease(pool, 'held', 60_000, () => 1, { table: 'leases' })).ran, false)
      assert.equal(await held.ctx.renew(), true)
      held.release()
      await held.outcome
    } finally {
      await pool.end()
      await server.stop()
    }
  })
})

describe('a connection killed mid-tick (pg_terminate_backend)', () => {
  test('on a single connection renew rejects with the driver error, and no other replica runs the occurrence inside the lease', {
    timeout: TIMEOUT,
  }, async (t) => {
    const job = 'killed-client'
    const client = await connect()
    const other = await testPool({ max: 2 })
    try {
      const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid
      let saw: LeaseContext | undefined
      const outcome = await withCronLease(
        client,
        job,
        60_000,
        async (ctx) => {
          saw = ctx
          await admin.query('SELECT pg_terminate_backend($1)', [pid])
          await assert.rejects(ctx.renew(), (error: Error) => {
            t.diagnostic(`renew saw: ${error.message}`)
            return isDriverError(error)
          })
          // A rejected renew is not a lost lease: the lease is still this claim's.
          assert.equal(ctx.signal.aborted, false)
          assert.equal((await withCronLease(other, job, 60_000, () => 'twice', { table })).ran, false)
          return 'once'
        },
        { table },
      )
      assert.deepEqual(outcome, { ran: true, result: 'once' })
      const now = await row(job)
      assert.equal(now?.held, true)
      assert.equal(now?.token, saw?.claimToken, 'the row is still the killed replica’s claim')
    } finally {
      await client.end().catch(() => {})
      await other.end()
    }
  })

  test('with keep-alive the beats fail and ctx.signal aborts before another replica can take over, which happens only after the lease expired', {
    timeout: TIMEOUT,
  }, async () => {
    const job = 'killed-keepalive'
    const client = await connect()
    const other = await testPool({ max: 2 })
    try {
      const pid = (await client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid
      let takeover: { abortedFirst: boolean; token: string } | undefined
      await withCronLease(
        client,
        job,
        1500,
        async (ctx) => {
          await admin.query('SELECT pg_terminate_backend($1)', [pid])
          const expiry = (await row(job))?.lease_until as string
          assert.equal((await withCronLease(other, job, 60_000, () => 'twice', { table })).ran, false)
          // The other replica keeps trying, as a scheduler firing late would.
          takeover = await eventually('another replica to take over the lapsed lease', async () => {
            const { ran, result } = await withCronLease(
              other,
              job,
              60_000,
              (next) => ({ abortedFirst: ctx.signal.aborted, token: next.claimToken as string }),
              { table, holder: 'successor' },
            )
            return ran ? result : undefined
          })
          assert.equal(takeover.abortedFirst, true, 'the killed replica was told before the successor ran')
          assert.match(String(ctx.signal.reason?.message), /ran out before a keep-alive beat/)
          assert.ok(
            await notBefore(takeover.token, expiry),
            `successor claimed at ${takeover.token}, lease ran to ${expiry}`,
          )
        },
        { table, keepAlive: { beatMs: 300, extendMs: 1000 } },
      )
      assert.ok(takeover)
    } finally {
      await client.end().catch(() => {})
      await other.end()
    }
  })

  test('on a pool the dead connection is replaced, so renew succeeds (a lease belongs to its claim, not to a connection); once another claim replaces it, renew resolves false and ctx.signal aborts', {
    timeout: TIMEOUT,
  }, async () => {
    const job = 'killed-pool'
    const pool = await testPool({ max: 1 })
    const idleErrors: unknown[] = []
    pool.on('error', (error) => idleErrors.push(error))
    try {
      await withCronLease(
        pool,
        job,
        60_000,
        async (ctx) => {
          const pid = (await pool.query('SELECT pg_backend_pid() AS pid')).rows[0].pid
          await admin.query('SELECT pg_terminate_backend($1)', [pid])
          await eventually('the pool to notice its connection died', async () =>
            idleErrors.length > 0 ? true : undefined,
          )
          assert.equal(await ctx.renew(), true)
          assert.equal(ctx.signal.aborted, false)
          await expire(job)
          assert.equal((await withCronLease(admin, job, 60_000, () => 1, { table, holder: 'successor' })).ran, true)
          assert.equal(await ctx.renew(), false)
          assert.equal(ctx.signal.aborted, true)
        },
        { table },
      )
      assert.equal((await row(job))?.holder, 'successor')
    } finally {
      await pool.end()
    }
  })
})

describe('the claim’s reply lost after the server committed it', () => {
  test('withCronLease rejects, the row shows the lease held, and no replica runs that occurrence before it expires', {
    timeout: TIMEOUT,
  }, async (t) => {
    const job = 'lost-reply'
    const proxy = await lossyProxy(Number(new URL(url).port))
    const proxied = new URL(url)
    proxied.port = String(proxy.port)
    const lossy = new pg.Pool({ connectionString: proxied.toString(), max: 1 })
    lossy.on('error', () => {})
    const other = await testPool({ max: 2 })
    try {
      let ticks = 0
      const replyLost = proxy.loseRepliesAfter('ON CONFLICT (job_name)')
      const claim = withCronLease(lossy, job, 1500, () => ticks++, { table, holder: 'lost' })
      await replyLost
      // The statement reached the server; wait for its commit to be visible, then break the link.
      const held = await eventually('the unanswered claim to commit', async () => {
        const r = await row(job)
        return r?.holder === 'lost' ? r : undefined
      })
      proxy.cut()
      await assert.rejects(claim, (error: Error) => {
        t.diagnostic(`the caller saw: ${error.message}`)
        return isDriverError(error)
      })
      assert.equal(ticks, 0, 'the replica whose reply was lost does not run the tick')
      assert.equal(held.held, true, 'the lease is held in the table')

      assert.equal((await withCronLease(other, job, 60_000, () => 'twice', { table })).ran, false)
      const successor = await eventually('a replica to claim after the lease expired', async () => {
        const { ran, result } = await withCronLease(other, job, 60_000, (ctx) => ctx.claimToken as string, {
          table,
          holder: 'successor',
        })
        return ran ? result : undefined
      })
      assert.ok(
        await notBefore(successor, held.lease_until),
        `claimed at ${successor}, lease ran to ${held.lease_until}`,
      )
    } finally {
      await lossy.end()
      await other.end()
      await proxy.close()
    }
  })
})

describe('a renew’s reply lost after the server committed it', () => {
  test('renew rejects while the lease was extended: the tick is left unsure, and the lease is only longer, never shorter', {
    timeout: TIMEOUT,
  }, async () => {
    const job = 'lost-renew'
    const proxy = await lossyProxy(Number(new URL(url).port))
    const proxied = new URL(url)
    proxied.port = String(proxy.port)
    const lossy = new pg.Pool({ connectionString: proxied.toString(), max: 1 })
    lossy.on('error', () => {})
    try {
      await withCronLease(
        lossy,
        job,
        5_000,
        async (ctx) => {
          const before = (await row(job))?.lease_until as string
          const replyLost = proxy.loseRepliesAfter('SET lease_until = clock_timestamp()')
          const renew = ctx.renew(60_000)
          await replyLost
          const extended = await eventually('the unanswered renew to commit', async () => {
            const r = await row(job)
            return r && r.lease_until !== before ? r : undefined
          })
          proxy.cut()
          await assert.rejects(renew, isDriverError)
          assert.equal(ctx.signal.aborted, false)
          assert.equal(extended.token, ctx.claimToken, 'still this claim')
          assert.ok(await notBefore(extended.lease_until, before))
          // The pool reconnects, and the claim can still renew: nothing was lost but a reply.
          assert.equal(await ctx.renew(60_000), true)
        },
        { table },
      )
    } finally {
      await lossy.end()
      await proxy.close()
    }
  })
})

describe('statement_timeout during the claim', () => {
  /**
   * Another session's first claim of the job, in flight until `release()` rolls it back: claimants
   * see no row yet, try to insert, and wait on that insert (the one wait the claim still has; an
   * existing row locked by a racing claim is skipped, not waited for).
   */
  async function firstClaimInFlight(job: string) {
    const locker = await admin.connect()
    await locker.query('BEGIN')
    await locker.query(
      `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder) VALUES ($1, clock_timestamp(), 'in flight')`,
      [job],
    )
    return {
      async release() {
        await locker.query('ROLLBACK')
        locker.release()
      },
    }
  }

  test('a claim that waits on a row lock past statement_timeout rejects with 57014, the tick does not run, and nothing is written', {
    timeout: TIMEOUT,
  }, async () => {
    const job = 'statement-timeout'
    const lock = await firstClaimInFlight(job)
    const claimant = await connect()
    await claimant.query("SET statement_timeout = '300ms'")
    try {
      let ticks = 0
      await assert.rejects(
        withCronLease(claimant, job, 60_000, () => ticks++, { table, holder: 'timed-out' }),
        {
          code: '57014',
        },
      )
      assert.equal(ticks, 0)
    } finally {
      await lock.release()
      await claimant.end()
    }
    assert.equal(await row(job), undefined)
    assert.equal((await withCronLease(admin, job, 60_000, () => 1, { table })).ran, true)
  })

  test('a client-side query_timeout is not a statement_timeout: the call rejects, but the server still commits the claim, so nobody runs that occurrence', {
    timeout: TIMEOUT,
  }, async () => {
    const job = 'query-timeout'
    const lock = await firstClaimInFlight(job)
    const claimant = await connect({ query_timeout: 300 })
    let ticks = 0
    try {
      await assert.rejects(
        withCronLease(claimant, job, 60_000, () => ticks++, { table, holder: 'timed-out' }),
        /Query read timeout/,
      )
    } finally {
      await lock.release()
    }
    try {
      const now = await eventually('the abandoned claim to commit', async () => {
        const r = await row(job)
        return r?.holder === 'timed-out' ? r : undefined
      })
      assert.equal(now.held, true)
      assert.equal(ticks, 0)
      assert.equal((await withCronLease(admin, job, 60_000, () => 'twice', { table })).ran, false)
    } finally {
      await claimant.end().catch(() => {})
    }
  })
})

describe('a SERIALIZABLE transaction handle racing another claimant: never two winners', () => {
  for (const rowExists of [false, true]) {
    const when = rowExists ? 'an expired row' : 'no row yet'

    async function prepare(job: string) {
      if (!rowExists) return
      await withCronLease(admin, job, 60_000, () => 0, { table, holder: 'previous' })
      await expire(job)
    }

    for (const level of ['SERIALIZABLE', 'REPEATABLE READ']) {
      test(`(${when}) a ${level} transaction whose snapshot predates a rival's committed claim fails with 40001 and only the rival runs`, {
        timeout: TIMEOUT,
      }, async () => {
        const job = `late-${level}-${rowExists}`
        await prepare(job)
        const txn = await connect()
        try {
          await txn.query(`BEGIN ISOLATION LEVEL ${level}`)
          await txn.query('SELECT 1') // takes the snapshot
          assert.deepEqual(await withCronLease(admin, job, 60_000, () => 'rival', { table, holder: 'rival' }), {
            ran: true,
            result: 'rival',
          })
          let ticks = 0
          await assert.rejects(
            withCronLease(txn, job, 60_000, () => ticks++, { table, holder: 'txn' }),
            {
              code: '40001',
            },
          )
          assert.equal(ticks, 0)
        } finally {
          await txn.query('ROLLBACK')
          await txn.end()
        }
        assert.equal((await row(job))?.holder, 'rival')
      })
    }

    // With no row yet, a rival's insert waits on the transaction's; an expired row the transaction
    // has locked is skipped, so the rival loses at once.
    const rivalWaits = !rowExists
    test(`(${when}) a transaction that claims first runs its tick inside it; a rival ${rivalWaits ? 'waits on the row lock until the commit, then loses' : 'loses at once, without waiting'}`, {
      timeout: TIMEOUT,
    }, async () => {
      const job = `serializable-first-${rowExists}`
      await prepare(job)
      const txn = await connect()
      try {
        await txn.query('BEGIN ISOLATION LEVEL SERIALIZABLE')
        assert.deepEqual(await withCronLease(txn, job, 60_000, () => 'txn', { table, holder: 'txn' }), {
          ran: true,
          result: 'txn',
        })
        let settled = false
        const rival = withCronLease(admin, job, 60_000, () => 'rival', { table, holder: 'rival' }).finally(() => {
          settled = true
        })
        await sleep(300)
        assert.equal(
          settled,
          !rivalWaits,
          rivalWaits ? 'the rival waits for the transaction' : 'the rival did not wait',
        )
        await txn.query('COMMIT')
        assert.deepEqual(await rival, { ran: false, result: null })
      } finally {
        await txn.end()
      }
      assert.equal((await row(job))?.holder, 'txn')
    })

    test(`(${when}) two SERIALIZABLE transactions: the first claims, the second ${rivalWaits ? 'fails with 40001 once the first commits' : 'loses at once'}`, {
      timeout: TIMEOUT,
    }, async () => {
      const job = `serializable-both-${rowExists}`
      await prepare(job)
      const first = await connect()
      const second = await connect()
      try {
        await first.query('BEGIN ISOLATION LEVEL SERIALIZABLE')
        await second.query('BEGIN ISOLATION LEVEL SERIALIZABLE')
        await second.query('SELECT 1')
        assert.equal((await withCronLease(first, job, 60_000, () => 1, { table, holder: 'first' })).ran, true)
        let ticks = 0
        const late = withCronLease(second, job, 60_000, () => ticks++, { table, holder: 'second' })
        late.catch(() => {})
        await sleep(100)
        await first.query('COMMIT')
        if (rivalWaits) await assert.rejects(late, { code: '40001' })
        else assert.deepEqual(await late, { ran: false, result: null })
        assert.equal(ticks, 0)
      } finally {
        await second.query('ROLLBACK')
        await first.end()
        await second.end()
      }
      assert.equal((await row(job))?.holder, 'first')
    })

    test(`(${when}) a claim in a transaction that rolls back never happened: ${rivalWaits ? 'the waiting rival then wins' : 'the rival lost at once, and the next claim wins'}, so the rolled-back tick's work must live in that transaction`, {
      timeout: TIMEOUT,
    }, async () => {
      const job = `serializable-rollback-${rowExists}`
      await prepare(job)
      const txn = await connect()
      const ran: string[] = []
      try {
        await txn.query('BEGIN ISOLATION LEVEL SERIALIZABLE')
        await withCronLease(txn, job, 60_000, () => ran.push('txn'), { table, holder: 'txn' })
        const rival = withCronLease(admin, job, 60_000, () => ran.push('rival'), { table, holder: 'rival' })
        await sleep(100)
        await txn.query('ROLLBACK')
        assert.equal((await rival).ran, rivalWaits)
        if (!rivalWaits) await withCronLease(admin, job, 60_000, () => ran.push('rival'), { table, holder: 'rival' })
      } finally {
        await txn.end()
      }
      assert.deepEqual(ran, ['txn', 'rival'])
      assert.equal((await row(job))?.holder, 'rival')
    })
  }
})
