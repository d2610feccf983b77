/**
 * A mixed fleet with the real published 1.0.1 (installed as `pg-cron-lease-original`): its own
 * withCronLease, claim and renew, against this package on one lease table of either shape.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { withCronLease as originalWithCronLease } from 'pg-cron-lease-original'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { listLeases, pauseJob, quoteTable, resumeJob, withCronLease } from '../../../src/index.ts'

let originalPool: pg.Pool
let upgradedPool: pg.Pool
let operator: pg.Pool
/** A table made by this package's createTableSql, and one of the original four-column shape. */
let currentTable: string
let originalTable: string
const warnings: string[] = []
const logger = { warn: (message: string) => warnings.push(message) }

before(async () => {
  originalPool = await testPool({ max: 10 })
  upgradedPool = await testPool({ max: 10 })
  operator = await testPool({ max: 2 })
  currentTable = await freshTable(operator, 'published')
  originalTable = `published_original_${randomBytes(5).toString('hex')}`
  await operator.query(`CREATE TABLE ${quoteTable(originalTable)} (
    job_name    TEXT PRIMARY KEY,
    lease_until TIMESTAMPTZ NOT NULL,
    holder      TEXT,
    claimed_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
  )`)
})
after(async () => {
  await Promise.all([originalPool.end(), upgradedPool.end(), operator.end()])
})

/** A replica on 1.0.1 claims: whether its tick ran. */
async function originalRuns(table: string, jobName: string, holder: string, leaseMs = 60_000, tick = () => {}) {
  return (await originalWithCronLease(originalPool, jobName, leaseMs, tick, { table, holder })).ran
}

/** A replica on this package claims: whether its tick ran. */
async function upgradedRuns(table: string, jobName: string, holder: string, leaseMs = 60_000, tick = () => {}) {
  return (await withCronLease(upgradedPool, jobName, leaseMs, tick, { table, holder, logger })).ran
}

const leaseOf = async (table: string, jobName: string) =>
  (await listLeases(operator, { table })).find((l) => l.jobName === jobName)!

/** The items in a uniformly random order (Fisher-Yates). */
function shuffled<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[items[i], items[j]] = [items[j]!, items[i]!]
  }
  return items
}

describe('a mixed fleet with the real published 1.0.1 shares one lease', () => {
  const shapes = [
    { shape: "the original package's four-column shape", table: () => originalTable },
    { shape: "this package's createTableSql shape", table: () => currentTable },
  ]
  for (const { shape, table: tableOf } of shapes) {
    test(`5 claimants of 1.0.1 and 5 of this package fire at once, 40 rounds, on ${shape}: exactly one run a round`, async (t) => {
      const table = tableOf()
      const jobName = 'published:race'
      const wins = { original: 0, upgraded: 0 }
      for (let round = 0; round < 40; round++) {
        // Round 0 races for a row that does not exist yet; every later one for an expired lease.
        if (round > 0) await expireLease(operator, table, jobName)
        const ran: { kind: 'original' | 'upgraded'; holder: string }[] = []
        const claimant = (kind: 'original' | 'upgraded', i: number) => () => {
          const holder = `${kind}-${i}`
          const tick = () => void ran.push({ kind, holder })
          return (kind === 'original' ? originalRuns : upgradedRuns)(table, jobName, holder, 60_000, tick)
        }
        const claimants = [0, 1, 2, 3, 4].flatMap((i) => [claimant('original', i), claimant('upgraded', i)])
        // Sent in a new random order each round, so it favours no kind and no replica, each up to
        // 10 ms late, as replicas' timers fire: this package's claim may read before it writes, so in
        // a dead heat 1.0.1's one statement would always be first.
        const late = (claim: () => Promise<boolean>) => sleep(Math.random() * 10).then(claim)
        const outcomes = await Promise.all(shuffled(claimants).map(late))
        assert.equal(ran.length, 1, `round ${round}: ${ran.length} ticks ran`)
        assert.equal(outcomes.filter(Boolean).length, 1, `round ${round}: one claimant says it ran`)
        assert.equal((await leaseOf(table, jobName)).holder, ran[0]!.holder, `round ${round}: the row names the winner`)
        wins[ran[0]!.kind]++
      }
      t.diagnostic(`rounds won: ${wins.original} by 1.0.1, ${wins.upgraded} by this package`)
      assert.ok(wins.original > 0 && wins.upgraded > 0, `both kinds won rounds: ${JSON.stringify(wins)}`)
      assert.ok(
        warnings.every((w) => /migrate/.test(w)),
        `the only warnings are the missing outcome columns: ${JSON.stringify(warnings)}`,
      )
    })
  }
})

describe('1.0.1 and a pause made by this package', () => {
  test('no claim of 1.0.1 runs during a pause, open-ended or for a length; after it, one does', async () => {
    const table = currentTable
    for (const [jobName, opts] of [
      ['published:paused-open', {}],
      ['published:paused-for', { forMs: 500 }],
    ] as const) {
      assert.equal(await originalRuns(table, jobName, 'original-0', 1), true)
      await sleep(5)
      assert.equal(await pauseJob(operator, jobName, { table, ...opts }), true)
      const until = performance.now() + 350
      let tries = 0
      while (performance.now() < until) {
        const runs = await Promise.all([0, 1, 2, 3, 4].map((i) => originalRuns(table, jobName, `original-${i}`, 1)))
        assert.deepEqual(runs, [false, false, false, false, false], `${jobName}: a claim of 1.0.1 ran during the pause`)
        tries += runs.length
        await sleep(20)
      }
      assert.ok(tries >= 25, `${jobName}: at least 25 claims tried during the pause, got ${tries}`)
      assert.equal((await leaseOf(table, jobName)).paused, true, `${jobName}: still paused after the tries`)
      if ('forMs' in opts) await sleep(250)
      else assert.equal(await resumeJob(operator, jobName, { table }), true)
      assert.equal(await originalRuns(table, jobName, 'original-1'), true, `${jobName}: claimable after the pause`)
    }
  })

  test('a tick of 1.0.1 that renews during a pause ends the pause: its renew is fenced only on holder and an unexpired lease', async () => {
    const table = currentTable
    const jobName = 'published:renewed-in-pause'
    let renew!: (ms?: number) => Promise<boolean>
    let finish!: () => void
    const tick = originalWithCronLease(
      originalPool,
      jobName,
      60_000,
      (ctx) => {
        renew = ctx.renew
        return new Promise<void>((resolve) => {
          finish = resolve
        })
      },
      { table, holder: 'original-renewer' },
    )
    while (!renew) await sleep(5)

    await pauseJob(operator, jobName, { table })
    const paused = await leaseOf(table, jobName)
    assert.deepEqual([paused.paused, paused.held, paused.leaseUntil], [true, true, 'infinity'])
    assert.equal(await upgradedRuns(table, jobName, 'upgraded-0'), false, 'paused')

    assert.equal(await renew(300), true, "1.0.1's renew matches during the pause")
    const renewed = await leaseOf(table, jobName)
    const { rows } = await operator.query(`SELECT paused_until::text FROM ${quoteTable(table)} WHERE job_name = $1`, [
      jobName,
    ])
    assert.equal(rows[0].paused_until, 'infinity', 'the pause is still written in the row')
    assert.equal(renewed.pausedUntil, null, 'but listLeases reports none')
    assert.ok(renewed.leaseUntil < '9999', `the lease now ends at a finite time: ${renewed.leaseUntil}`)
    assert.equal(renewed.paused, false, 'listLeases no longer reports a pause that does not hold the lease')
    assert.ok(renewed.held && renewed.remainingMs <= 300, 'held for what is left of the renew')
    assert.equal(await upgradedRuns(table, jobName, 'upgraded-0'), false, "held until the renew's 300 ms run out")

    await sleep(400)
    const claimable = await leaseOf(table, jobName)
    assert.deepEqual([claimable.paused, claimable.held], [false, false], 'claimable, and not reported paused')
    assert.equal(await upgradedRuns(table, jobName, 'upgraded-0'), true, 'a claim by this package runs')
    finish()
    assert.equal((await tick).ran, true)
  })
})

describe('a lease that 1.0.1 or a later claim wrote over a pause is its holder’s', () => {
  for (const admin of ['resume', 'a shorter pause'] as const) {
    test(`1.0.1 renews past the pause’s end, then ${admin}: no rival runs inside that renewed lease`, async () => {
      const table = currentTable
      const jobName = `published:renewed-past-pause:${admin}`
      let renewedAt = 0
      let release!: () => void
      const paused = new Promise<void>((resolve) => {
        release = resolve
      })
      const held = originalWithCronLease(
        originalPool,
        jobName,
        2000,
        async ({ renew }: { renew: (ms: number) => Promise<boolean> }) => {
          await paused
          assert.equal(await renew(60_000), true, "1.0.1's renew during the pause succeeds")
          renewedAt = Date.now()
          const lease = await leaseOf(table, jobName)
          assert.equal(lease.paused, false, 'the renew ended the pause')
          if (admin === 'resume') await resumeJob(operator, jobName, { table })
          else await pauseJob(operator, jobName, { table, forMs: 100 })
          await sleep(300)
          assert.equal(await upgradedRuns(table, jobName, 'rival'), false, 'the renewed lease still holds')
        },
        { table, holder: 'original' },
      )
      for (let i = 0; i < 100 && (await leaseOf(table, jobName).catch(() => undefined)) === undefined; i++) {
        await sleep(10)
      }
      assert.equal(await pauseJob(operator, jobName, { table, forMs: 5000 }), true)
      release()
      await held
      assert.ok(renewedAt > 0)
      const lease = await leaseOf(table, jobName)
      assert.ok(Date.parse(lease.leaseUntil) - Date.parse(lease.checkedAt) > 50_000, 'the 60 s lease was not cut')
      await expireLease(operator, table, jobName)
    })
  }

  test('a claim after a broken pause is not shown paused, renews, and no resume cuts it', async () => {
    const table = currentTable
    const jobName = 'published:claim-after-broken-pause'
    assert.equal(await originalRuns(table, jobName, 'original', 300, async () => {}), true)
    assert.equal(await pauseJob(operator, jobName, { table, forMs: 3000 }), true)
    // What a renew of 1.0.1 does to the row during the pause, applied directly (its tick is over):
    // lease_until moved below the pause's end.
    await operator.query(
      `UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() + interval '100 milliseconds' WHERE job_name = $1`,
      [jobName],
    )
    await sleep(150)
    let renewed: boolean | undefined
    let go!: () => void
    const running = new Promise<void>((resolve) => {
      go = resolve
    })
    const tick = withCronLease(
      upgradedPool,
      jobName,
      10_000,
      async (ctx) => {
        renewed = await ctx.renew(10_000)
        await running
      },
      { table, holder: 'claim-b', logger },
    )
    for (let i = 0; i < 200 && renewed === undefined; i++) await sleep(10)
    assert.equal(renewed, true, 'its own renew is not fenced by the broken pause')
    assert.equal((await leaseOf(table, jobName)).paused, false, 'a running claim is not shown paused')
    await resumeJob(operator, jobName, { table })
    assert.equal(await upgradedRuns(table, jobName, 'rival'), false, 'resume did not cut the claim')
    go()
    assert.equal((await tick).ran, true)
    await expireLease(operator, table, jobName)
  })
})
