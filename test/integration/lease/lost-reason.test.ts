/**
 * A tick whose renew finds its lease gone is told why, in ctx.signal's reason: the job was paused,
 * its lease was released, it expired, or another claim replaced it.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { type LeaseContext, pauseJob, releaseLease, withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
let replica: pg.Pool
let table: string
let jobs = 0
const nextJob = () => `lost-${++jobs}`
const quiet = { warn() {}, debug() {} }

before(async () => {
  pool = await testPool({ max: 4 })
  replica = await testPool({ max: 2 })
  table = await freshTable(pool, 'lost')
})
after(async () => {
  await Promise.all([pool.end(), replica.end()])
})

/** Runs a tick with a `leaseMs` lease; `meanwhile` acts on the job while it runs; then it renews. */
async function renewAfter(leaseMs: number, meanwhile: (job: string) => Promise<unknown>) {
  const job = nextJob()
  let ctx!: LeaseContext
  let renewed: boolean | undefined
  const outcome = await withCronLease(
    pool,
    job,
    leaseMs,
    async (c) => {
      ctx = c
      await meanwhile(job)
      renewed = await c.renew(60_000)
    },
    { table, logger: quiet },
  )
  assert.equal(outcome.ran, true)
  assert.equal(renewed, false, 'the renew found the lease gone')
  assert.equal(ctx.signal.aborted, true)
  return String((ctx.signal.reason as Error).message)
}

describe('a lost lease says what took it', { timeout: 30_000 }, () => {
  test('paused for a while: "the job was paused until …"', async () => {
    const why = await renewAfter(60_000, (job) => pauseJob(replica, job, { table, forMs: 60_000 }))
    assert.match(why, /^pg-cron-lease: the lease for 'lost-\d+' was lost: the job was paused until \d{4}-\d\d-\d\dT/)
  })

  test('paused until resumed: "the job was paused until resumed"', async () => {
    const why = await renewAfter(60_000, (job) => pauseJob(replica, job, { table }))
    assert.match(why, /was lost: the job was paused until resumed/)
  })

  test('released: "it was released"', async () => {
    const why = await renewAfter(60_000, (job) => releaseLease(replica, job, { table }))
    assert.match(why, /was lost: it was released/)
  })

  test('run out: "it expired"', async () => {
    const why = await renewAfter(200, () => sleep(400))
    assert.match(why, /was lost: it expired$/)
  })

  test('run out and claimed by another replica: "another claim replaced it"', async () => {
    const why = await renewAfter(200, async (job) => {
      await sleep(400)
      const other = await withCronLease(replica, job, 60_000, () => {}, { table, logger: quiet })
      assert.equal(other.ran, true)
    })
    assert.match(why, /was lost: another claim replaced it$/)
  })
})
