import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { type LeaseContext, type Queryable, withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
let table: string
let job = 0
const nextJob = () => `long-${++job}`

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'keepalive')
})
after(() => pool.end())

const leaseLeftMs = async (jobName: string) =>
  Number(
    (
      await pool.query(
        `SELECT extract(epoch FROM lease_until - clock_timestamp()) * 1000 AS left_ms FROM "${table}" WHERE job_name = $1`,
        [jobName],
      )
    ).rows[0]?.left_ms,
  )

/** Claims `jobName` every 50 ms from another holder until stopped; records every win. */
function competitor(jobName: string) {
  const wins: number[] = []
  let stopped = false
  const loop = (async () => {
    while (!stopped) {
      const outcome = await withCronLease(pool, jobName, 5000, () => {}, { table, holder: 'competitor' })
      if (outcome.ran) {
        wins.push(performance.now())
        return
      }
      await sleep(50)
    }
  })()
  return {
    wins,
    stop: async () => {
      stopped = true
      await loop
    },
  }
}

describe('keep-alive holds the lease exactly as long as the tick runs', () => {
  test('a tick three times longer than its lease stays exclusive, and a competitor wins soon after it returns', async () => {
    const jobName = nextJob()
    const leaseMs = 600
    const keepAlive = { beatMs: 150, extendMs: 400 }
    let rival!: ReturnType<typeof competitor>
    let returnedAt = 0
    const outcome = await withCronLease(
      pool,
      jobName,
      leaseMs,
      async (ctx) => {
        rival = competitor(jobName)
        await sleep(3 * leaseMs)
        assert.equal(ctx.signal.aborted, false)
        assert.deepEqual(rival.wins, [], 'nobody else ran while the tick ran')
        returnedAt = performance.now()
        return 'done'
      },
      { table, holder: 'long', keepAlive },
    )
    assert.deepEqual(outcome, { ran: true, result: 'done' })
    const deadline = performance.now() + 5000
    while (rival.wins.length === 0 && performance.now() < deadline) await sleep(20)
    await rival.stop()
    assert.equal(rival.wins.length, 1, 'the competitor won once the tick had returned')
    const waited = (rival.wins[0] ?? 0) - returnedAt
    assert.ok(
      waited <= keepAlive.extendMs + 300,
      `the competitor waited ${Math.round(waited)} ms after the tick returned`,
    )
  })

  test('a beat never shortens a longer renew(ms) made by the tick', async () => {
    const jobName = nextJob()
    await withCronLease(
      pool,
      jobName,
      1000,
      async (ctx) => {
        assert.equal(await ctx.renew(5000), true)
        await sleep(400) // several beats of extendMs 300
        assert.ok((await leaseLeftMs(jobName)) > 4000)
      },
      { table, keepAlive: { beatMs: 100, extendMs: 300 } },
    )
  })
})

describe('the signal aborts when the lease is lost', () => {
  test('a lease stolen mid-tick aborts the signal within one beat', async () => {
    const jobName = nextJob()
    const beatMs = 150
    const outcome = await withCronLease(
      pool,
      jobName,
      2000,
      async (ctx) => {
        // Listened to from the start: a beat can notice the theft before the thief's call returns.
        const aborted = new Promise<number>((resolve) => {
          ctx.signal.addEventListener('abort', () => resolve(performance.now()), { once: true })
        })
        await expireLease(pool, table, jobName)
        assert.equal((await withCronLease(pool, jobName, 5000, () => {}, { table, holder: 'thief' })).ran, true)
        const stolenAt = performance.now()
        const abortedAt = await aborted
        assert.ok(
          abortedAt - stolenAt <= beatMs + 300,
          `aborted ${Math.round(abortedAt - stolenAt)} ms after the theft`,
        )
        assert.ok(ctx.signal.reason instanceof Error)
        assert.match(ctx.signal.reason.message, new RegExp(`the lease for '${jobName}' was lost`))
        return 'noticed'
      },
      { table, holder: 'victim', keepAlive: { beatMs, extendMs: 1000 } },
    )
    assert.deepEqual(outcome, { ran: true, result: 'noticed' })
    const { rows } = await pool.query(`SELECT holder FROM "${table}" WHERE job_name = $1`, [jobName])
    assert.equal(rows[0].holder, 'thief', 'the victim never took the lease back')
  })

  test('a renew() that resolves false aborts the signal', async () => {
    const jobName = nextJob()
    await withCronLease(
      pool,
      jobName,
      100,
      async (ctx) => {
        await sleep(200)
        assert.equal(await ctx.renew(), false)
        assert.equal(ctx.signal.aborted, true)
      },
      { table },
    )
  })

  test('a beat that fails with a database error is retried, and the signal does not abort while the lease lasts', async () => {
    const jobName = nextJob()
    let failBeats = 2
    const flaky: Queryable = {
      query: (text, params) => {
        if (text.startsWith('UPDATE') && failBeats-- > 0) return Promise.reject(new Error('connection reset'))
        return pool.query(text, params as unknown[])
      },
    }
    await withCronLease(
      flaky,
      jobName,
      1000,
      async (ctx) => {
        await sleep(1500)
        assert.equal(failBeats < 0, true, 'the failed beats were retried')
        assert.equal(ctx.signal.aborted, false)
        assert.ok((await leaseLeftMs(jobName)) > 0, 'later beats kept the lease')
      },
      { table, keepAlive: { beatMs: 100, extendMs: 800 } },
    )
  })

  test('when beats keep failing until the lease runs out, the signal aborts', async () => {
    const jobName = nextJob()
    const down: Queryable = {
      query: (text, params) =>
        text.startsWith('UPDATE')
          ? Promise.reject(new Error('database unreachable'))
          : pool.query(text, params as unknown[]),
    }
    let ctx!: LeaseContext
    await withCronLease(
      down,
      jobName,
      500,
      async (c) => {
        ctx = c
        await new Promise((resolve) => c.signal.addEventListener('abort', resolve, { once: true }))
      },
      { table, keepAlive: { beatMs: 100, extendMs: 300 } },
    )
    assert.match(String(ctx.signal.reason?.message), /was lost: it ran out before a keep-alive beat could extend it/)
  })
})

/**
 * The test pool, with the replies of the statements `late` picks held back by `ms`: the database
 * has already run them, the tick has not heard yet.
 */
function lateReplies(late: (text: string, params: unknown[]) => boolean, ms: number): Queryable {
  return {
    query: async (text, params) => {
      const result = await pool.query(text, params as unknown[])
      if (late(text, params)) await sleep(ms)
      return result
    },
  }
}

// Renew and beat are one statement; its fourth parameter says which (a beat keeps the later expiry).
const isBeat = (text: string, params: unknown[]) => text.startsWith('UPDATE') && params[3] === true
const isRenew = (text: string, params: unknown[]) => text.startsWith('UPDATE') && params[3] === false

/**
 * A tick with long beats (beatMs 100, extendMs 5000) shortens its lease with renew(250) at 120 ms,
 * while a rival claims every 50 ms. Resolves when the signal aborted and when the rival won, both
 * on performance.now().
 */
async function shortRenewRace(db: Queryable) {
  const jobName = nextJob()
  let abortedAt = Number.POSITIVE_INFINITY
  let rival!: ReturnType<typeof competitor>
  await withCronLease(
    db,
    jobName,
    5000,
    async (ctx) => {
      ctx.signal.addEventListener('abort', () => (abortedAt = performance.now()), { once: true })
      rival = competitor(jobName)
      await sleep(120)
      assert.equal(await ctx.renew(250), true)
      const deadline = performance.now() + 10_000
      while (rival.wins.length === 0 && performance.now() < deadline) await sleep(20)
    },
    { table, holder: 'short-renew', keepAlive: { beatMs: 100, extendMs: 5000 } },
  )
  await rival.stop()
  assert.equal(rival.wins.length, 1, 'the rival won once the lease had run out')
  return { abortedAt, rivalWonAt: rival.wins[0]! }
}

describe('the signal aborts no later than the expiry the database holds, whatever the reply delays', () => {
  for (const [name, late] of [
    ['a beat whose reply comes 600 ms late never moves the deadline past a shorter renew the database kept', isBeat],
    ['a renew whose reply comes 400 ms late shortens the deadline from the moment it was sent', isRenew],
  ] as const) {
    test(`${name}: the signal aborts before a rival wins, 4 times in 4`, async () => {
      // The beats' replies come 600 ms late: more than the renew's 250 ms, so the beat sent after the
      // renew (which may extend the lease again, as a beat should) is heard after the renew's
      // deadline, however late the tick's own timer woke to send the renew.
      const db = lateReplies(late, isBeat === late ? 600 : 400)
      const races = await Promise.all([1, 2, 3, 4].map(() => shortRenewRace(db)))
      for (const { abortedAt, rivalWonAt } of races) {
        assert.ok(
          abortedAt <= rivalWonAt,
          abortedAt === Number.POSITIVE_INFINITY
            ? 'the rival won and the signal never aborted'
            : `the signal aborted ${Math.round(abortedAt - rivalWonAt)} ms after the rival won`,
        )
      }
    })
  }
})

describe('keep-alive leaves nothing behind', () => {
  test('validation errors take no lease', async () => {
    const jobName = nextJob()
    for (const keepAlive of [
      { beatMs: 500, extendMs: 500 },
      { beatMs: 100, extendMs: 5000 },
      { beatMs: -1, extendMs: 5 },
    ]) {
      await assert.rejects(
        withCronLease(pool, jobName, 1000, () => {}, { table, keepAlive }),
        TypeError,
      )
    }
    const { rows } = await pool.query(`SELECT 1 FROM "${table}" WHERE job_name = $1`, [jobName])
    assert.equal(rows.length, 0)
  })

  test('no timer remains after the tick: a process that ran one exits on its own', async () => {
    const script = `
      import pg from 'pg'
      import { withCronLease } from ${JSON.stringify(fileURLToPath(new URL('../../../src/index.ts', import.meta.url)))}
      const client = new pg.Client({ connectionString: process.env.DATABASE_URL })
      await client.connect()
      const outcome = await withCronLease(client, 'exit-${Date.now()}', 60_000, () => new Promise((r) => setTimeout(r, 300)),
        { table: ${JSON.stringify(table)}, keepAlive: { beatMs: 50, extendMs: 30_000 } })
      await client.end()
      const timers = process.getActiveResourcesInfo().filter((r) => r === 'Timeout')
      console.log(JSON.stringify({ ran: outcome.ran, timers: timers.length }))
    `
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      env: { ...process.env, DATABASE_URL: await testDatabaseUrl() },
      encoding: 'utf8',
      timeout: 20_000,
    })
    assert.deepEqual(JSON.parse(out), { ran: true, timers: 0 })
  })
})
