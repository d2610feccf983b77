import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { type LeaseContext, withCronLease } from '../../../src/index.ts'
import { holdClaim as heldClaim } from '../../helpers/held-claim.ts'

let pool: pg.Pool
let table: string
let job = 0
const nextJob = () => `renew-${++job}`

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'renew')
})
after(() => pool.end())

const expiry = async (jobName: string) =>
  (
    await pool.query(
      `SELECT lease_until, extract(epoch FROM lease_until - clock_timestamp()) * 1000 AS left_ms FROM "${table}" WHERE job_name = $1`,
      [jobName],
    )
  ).rows[0]

/** A claim by `holder` whose tick runs until released. */
const holdClaim = (jobName: string, leaseMs: number, holder: string) =>
  heldClaim(pool, jobName, leaseMs, { table, holder })

describe('renew extends only the lease this claim holds', () => {
  test('renew moves lease_until forward and resolves true', async () => {
    const jobName = nextJob()
    const { ctx, release } = await holdClaim(jobName, 1000, 'a')
    const before = await expiry(jobName)
    await sleep(50)
    assert.equal(await ctx.renew(5000), true)
    const afterRenew = await expiry(jobName)
    assert.ok(afterRenew.lease_until > before.lease_until, 'lease_until moved forward')
    assert.ok(afterRenew.left_ms > 4500 && afterRenew.left_ms <= 5000, `left ${afterRenew.left_ms} ms`)
    assert.equal(await ctx.renew(), true, 'renew() defaults to leaseMs')
    assert.ok((await expiry(jobName)).left_ms <= 1000)
    release()
  })

  test('the claim token is microsecond ISO text and the row matches it exactly', async () => {
    const jobName = nextJob()
    const { ctx, release } = await holdClaim(jobName, 1000, 'a')
    assert.match(ctx.claimToken ?? '', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/)
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n FROM "${table}" WHERE job_name = $1 AND claimed_at = $2::text::timestamptz`,
      [jobName, ctx.claimToken],
    )
    assert.equal(rows[0].n, 1)
    release()
  })

  test('after the lease expired and another replica claimed, renew resolves false and the signal aborts', async () => {
    const jobName = nextJob()
    const { ctx, release } = await holdClaim(jobName, 150, 'a')
    await sleep(250)
    assert.equal((await withCronLease(pool, jobName, 5000, () => 1, { table, holder: 'b' })).ran, true)
    assert.equal(ctx.signal.aborted, false)
    assert.equal(await ctx.renew(5000), false)
    assert.equal(ctx.signal.aborted, true)
    assert.equal(ctx.signal, ctx.signal, 'one signal, however often it is read')
    assert.match(String(ctx.signal.reason?.message), /lease for 'renew-\d+' was lost/)
    const { rows } = await pool.query(`SELECT holder FROM "${table}" WHERE job_name = $1`, [jobName])
    assert.equal(rows[0].holder, 'b', 'the new holder kept its lease')
    release()
  })

  test('after a re-claim by a replica with the same holder string, renew resolves false', async () => {
    const jobName = nextJob()
    const { ctx, release } = await holdClaim(jobName, 150, 'container:1')
    await sleep(250)
    const other = await withCronLease(pool, jobName, 5000, (c) => c.claimToken, { table, holder: 'container:1' })
    assert.equal(other.ran, true)
    assert.notEqual(other.result, ctx.claimToken)
    assert.equal(await ctx.renew(5000), false)
    release()
  })

  test('after the lease expired with nobody else claiming, renew resolves false', async () => {
    const jobName = nextJob()
    const { ctx, release } = await holdClaim(jobName, 100, 'a')
    await sleep(200)
    assert.equal(await ctx.renew(), false)
    release()
  })

  test('a context kept after its tick settled cannot extend the lease: renew rejects and the row is unchanged', async () => {
    for (const settle of ['returns', 'throws'] as const) {
      const jobName = nextJob()
      let kept!: LeaseContext
      const run = withCronLease(
        pool,
        jobName,
        1000,
        (ctx) => {
          kept = ctx
          if (settle === 'throws') throw new Error('tick failed')
        },
        { table },
      )
      if (settle === 'throws') await assert.rejects(run, /tick failed/)
      else await run
      const before = await expiry(jobName)
      await assert.rejects(kept.renew(600_000), /its tick has settled; the lease is held until it expires/)
      const after = await expiry(jobName)
      assert.equal(
        after.lease_until.getTime(),
        before.lease_until.getTime(),
        `lease_until unchanged after a tick that ${settle}`,
      )
      assert.ok(after.left_ms <= 1000, `left ${after.left_ms} ms`)
    }
  })

  test('on a driver that reports only rowCount, the claim still wins but renew throws', async () => {
    const rowCountOnly = {
      query: async (text: string, params: unknown[]) => ({ rowCount: (await pool.query(text, params)).rowCount }),
    }
    const jobName = nextJob()
    const outcome = await withCronLease(
      rowCountOnly,
      jobName,
      1000,
      async (ctx) => {
        assert.equal(ctx.claimToken, null)
        await assert.rejects(ctx.renew(), (e: unknown) => e instanceof TypeError && /cannot renew/.test(e.message))
        return 'ran'
      },
      { table },
    )
    assert.deepEqual(outcome, { ran: true, result: 'ran' })
  })

  test('a millisecond-rounded token would not fence: the exact text does, 200 times in a row', async () => {
    // pg parses timestamptz into a millisecond Date; this is why the token travels as text.
    for (let i = 0; i < 200; i++) {
      const jobName = nextJob()
      const outcome = await withCronLease(pool, jobName, 1000, (ctx) => ctx.renew(), { table })
      assert.deepEqual(outcome, { ran: true, result: true })
    }
  })
})
