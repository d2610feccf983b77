import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { withCronLease } from '../../../src/index.ts'
import { quoteTable } from '../../../src/sql.ts'
import { writeCost } from '../../helpers/write-cost.ts'

let pool: pg.Pool
let table: string

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'losing')
})
after(() => pool.end())

const cost = (lose: () => Promise<unknown>, losses = 20) => writeCost(pool, lose, { losses })

describe('a losing claim writes nothing', () => {
  test('it consumes no transaction ID and writes no WAL, where the plain upsert does both', async (t) => {
    await withCronLease(pool, 'held', 60_000, () => {}, { table, holder: 'winner' })
    let ran = 0
    const ours = await cost(async () => {
      const outcome = await withCronLease(pool, 'held', 60_000, () => ran++, { table, holder: 'loser' })
      assert.equal(outcome.ran, false)
    })
    assert.equal(ran, 0)
    assert.deepEqual(ours, { xidsPerLoss: 0, walBytesPerLoss: 0 })

    // The statement the original package sent, for comparison: it locks the row even when its
    // WHERE is false, so every loser takes a transaction ID and writes a lock record.
    const quoted = quoteTable(table)
    const plainUpsert = `INSERT INTO ${quoted} (job_name, lease_until, holder) VALUES ($1, clock_timestamp() + $2::integer * interval '1 millisecond', $3)
      ON CONFLICT (job_name) DO UPDATE SET lease_until = EXCLUDED.lease_until, holder = EXCLUDED.holder, claimed_at = clock_timestamp()
      WHERE ${quoted}.lease_until <= clock_timestamp() RETURNING claimed_at`
    const plain = await cost(async () => {
      assert.equal((await pool.query(plainUpsert, ['held', 60_000, 'loser'])).rowCount, 0)
    })
    t.diagnostic(`losing claim per call: ours ${JSON.stringify(ours)}, plain upsert ${JSON.stringify(plain)}`)
    assert.ok(plain.xidsPerLoss >= 1, `the plain upsert took ${plain.xidsPerLoss} xids per loss`)
    assert.ok(plain.walBytesPerLoss > 0)
  })

  test('the same statement still produces exactly one winner when the lease is free', async () => {
    const outcomes = await Promise.all(
      Array.from({ length: 8 }, (_, i) => withCronLease(pool, 'free', 60_000, () => i, { table, holder: `h${i}` })),
    )
    assert.equal(outcomes.filter((o) => o.ran).length, 1)
  })
})
