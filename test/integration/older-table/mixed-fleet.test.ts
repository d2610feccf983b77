/**
 * A rolling upgrade: some replicas still run the original package, which claims with its
 * documented single upsert, and the rest run this one. Both kinds share one lease table and race
 * for the same occurrences.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { plainUpsertSql } from '../../../dev/peers.ts'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { quoteTable, withCronLease } from '../../../src/index.ts'
import { holdClaim } from '../../helpers/held-claim.ts'

let pool: pg.Pool
let table: string

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'mixed')
})
after(() => pool.end())

const LEASE_MS = 60_000

/** A replica on the original package claims: its claim token (claimed_at as text) if it won, else null. */
async function originalClaim(jobName: string, holder: string): Promise<string | null> {
  const { rowCount, rows } = await pool.query(plainUpsertSql(table), [jobName, LEASE_MS, holder])
  return rowCount === 1 ? rows[0].claimed_at : null
}

/** The original package's fenced renew, on the claimed_at its claim returned: the rows it matched. */
async function originalRenew(jobName: string, claimedAt: string): Promise<number | null> {
  const { rowCount } = await pool.query(
    `UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() + $3::integer * interval '1 millisecond'
     WHERE job_name = $1 AND claimed_at = $2::text::timestamptz AND lease_until > clock_timestamp()`,
    [jobName, claimedAt, LEASE_MS],
  )
  return rowCount
}

/** A replica on this package claims: whether its tick ran. */
async function upgradedClaim(jobName: string, holder: string): Promise<boolean> {
  return (await withCronLease(pool, jobName, LEASE_MS, () => {}, { table, holder })).ran
}

/** The items in a uniformly random order (Fisher-Yates). */
function shuffled<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[items[i], items[j]] = [items[j]!, items[i]!]
  }
  return items
}

type Winner = { kind: 'original' | 'upgraded'; holder: string }

const holderOf = async (jobName: string) =>
  (await pool.query(`SELECT holder FROM ${quoteTable(table)} WHERE job_name = $1`, [jobName])).rows[0]?.holder

describe('a mixed fleet during a rolling upgrade shares one lease', () => {
  test('5 original and 5 upgraded claimants race each occurrence, 50 rounds: exactly one winner a round, of either kind', async (t) => {
    const jobName = 'fleet:race'
    const wins = { original: 0, upgraded: 0 }
    for (let round = 0; round < 50; round++) {
      // Round 0 races for a row that does not exist yet; every later one for an expired lease.
      if (round > 0) await expireLease(pool, table, jobName)
      const original = [0, 1, 2, 3, 4].map((i) => async () => {
        const holder = `original-${i}`
        return (await originalClaim(jobName, holder)) === null ? [] : [{ kind: 'original' as const, holder }]
      })
      const upgraded = [0, 1, 2, 3, 4].map((i) => async () => {
        const holder = `upgraded-${i}`
        return (await upgradedClaim(jobName, holder)) ? [{ kind: 'upgraded' as const, holder }] : []
      })
      // The order they are sent in is shuffled each round, so it favours no kind and no replica, and
      // each fires up to 10 ms late, as replicas' timers do: an upgraded claim reads before it writes,
      // so in a dead heat the original package's one statement would always be first.
      const claimants = shuffled([...original, ...upgraded])
      const late = (claim: () => Promise<Winner[]>) => sleep(Math.random() * 10).then(claim)
      const winners = (await Promise.all(claimants.map(late))).flat()
      assert.equal(winners.length, 1, `round ${round} had ${winners.length} winners`)
      const [winner] = winners
      assert.equal(await holderOf(jobName), winner!.holder, `round ${round}: the row names the winner`)
      wins[winner!.kind]++
    }
    t.diagnostic(`rounds won: ${wins.original} original, ${wins.upgraded} upgraded`)
    assert.ok(wins.original > 0 && wins.upgraded > 0, `both kinds won rounds: ${JSON.stringify(wins)}`)
  })

  test('after an original claimant wins, an upgraded tick still holding its earlier claim renews false, even with the same holder name', async () => {
    const jobName = 'fleet:upgraded-then-original'
    const { ctx, release } = await holdClaim(pool, jobName, LEASE_MS, { table, holder: 'replica-1' })
    assert.equal(await ctx.renew(LEASE_MS), true, 'the renew matches while this claim holds')
    await expireLease(pool, table, jobName)
    const token = await originalClaim(jobName, 'replica-1')
    assert.notEqual(token, null, 'the original claimant won the expired lease')

    assert.equal(await ctx.renew(LEASE_MS), false)
    assert.equal(ctx.signal.aborted, true)
    assert.equal(
      await originalRenew(jobName, token!),
      1,
      "the original claimant's lease is untouched and still its own",
    )
    release()
  })

  test("after an upgraded claimant wins, the original package's fenced renew of its earlier claim matches no row", async () => {
    const jobName = 'fleet:original-then-upgraded'
    const token = await originalClaim(jobName, 'replica-1')
    assert.notEqual(token, null)
    assert.equal(await originalRenew(jobName, token!), 1, 'the renew matches while the original claim holds')
    await expireLease(pool, table, jobName)
    const upgraded = await withCronLease(pool, jobName, LEASE_MS, (c) => c.claimToken, { table, holder: 'replica-1' })
    assert.equal(upgraded.ran, true, 'the upgraded claimant won the expired lease')

    assert.equal(await originalRenew(jobName, token!), 0)
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n FROM ${quoteTable(table)}
       WHERE job_name = $1 AND claimed_at = $2::text::timestamptz AND lease_until > clock_timestamp()`,
      [jobName, upgraded.result],
    )
    assert.equal(rows[0].n, 1, 'the upgraded claim still holds the lease, with its own claim token')
  })
})
