/**
 * Each rule of the claim that keeps an occurrence from running twice, or a loser from writing,
 * reached on its own: the probe's two tests, the lock's occurrence test, the arbiter's re-check of
 * the occurrence under the row lock, and the catch-up's. The last three matter when a lease is
 * shorter than a wait: by the time a claimant that waited gets the row, the lease it waited behind
 * has run out, and only the occurrence still says the slot ran.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { catchUp, type Queryable, quoteTable, withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
before(async () => {
  pool = await testPool({ max: 6 })
})
after(() => pool.end())

/** A handle of its own over the pool that lists what it sends, the catalog read left out. */
function listing(before: (text: string) => Promise<void> = async () => {}) {
  const sent: string[] = []
  const db: Queryable = {
    async query(text: string, params?: unknown[]) {
      if (!text.startsWith('SELECT to_regclass(')) sent.push(text)
      await before(text)
      return pool.query(text, params)
    },
  }
  return { db, sent }
}

const xidMark = async () =>
  BigInt((await pool.query('SELECT txid_snapshot_xmax(txid_current_snapshot())::text AS x')).rows[0].x)

describe('the probe stops a loser at one read-only statement', () => {
  test('a held lease, and with the lease expired, an occurrence already claimed or an earlier one: the probe alone', async () => {
    const table = await freshTable(pool, 'probe_rules')
    const slot = Math.floor(Date.now() / 60_000) * 60_000
    const claim = (db: Queryable, at: number) =>
      withCronLease(db, 'job', 60_000, () => {}, { table, occurrence: new Date(at), record: false })
    assert.equal((await claim(pool, slot)).ran, true)
    const cases: [string, number][] = [
      ['the lease held', slot + 60_000],
      ['that occurrence claimed', slot],
      ['an earlier one', slot - 60_000],
    ]
    for (const [why, at] of cases) {
      if (why !== 'the lease held') await expireLease(pool, table, 'job')
      // A handle that has not won, so its claim starts with the probe.
      const { db, sent } = listing()
      assert.equal((await claim(db, at)).ran, false, why)
      assert.equal(sent.length, 1, `${why}: one statement, got ${sent.map((t) => t.slice(0, 30)).join(' | ')}`)
      assert.match(sent[0]!, /^SELECT true AS held FROM /, why)
    }
  })
})

describe('the claim locks no row whose occurrence was claimed after its probe', () => {
  test('a racer claims the slot between the probe and the claim, and its lease runs out: the claim loses, with no transaction ID', {
    timeout: 30_000,
  }, async () => {
    const table = await freshTable(pool, 'lock_rule')
    const slot = Math.floor(Date.now() / 60_000) * 60_000
    const opts = (at: number) => ({ table, occurrence: new Date(at), record: false })
    assert.equal((await withCronLease(pool, 'job', 1, () => {}, opts(slot - 60_000))).ran, true)
    await expireLease(pool, table, 'job')
    let racerRan = 0
    let mark: bigint | undefined
    const { db } = listing(async (text) => {
      if (!text.startsWith('INSERT INTO ')) return
      // The probe found the slot free; now another replica claims it with a 1 ms lease, which ends.
      assert.equal((await withCronLease(pool, 'job', 1, () => void racerRan++, opts(slot))).ran, true)
      await new Promise((resolve) => setTimeout(resolve, 20))
      mark = await xidMark()
    })
    let ran = 0
    assert.equal((await withCronLease(db, 'job', 60_000, () => void ran++, opts(slot))).ran, false)
    assert.deepEqual([racerRan, ran], [1, 0], 'the slot ran once')
    assert.ok(mark !== undefined, 'the claim was sent after the probe')
    assert.equal((await xidMark()) - mark, 0n, 'the losing claim took no transaction ID: it locked nothing')
  })
})

describe('the arbiter re-checks the occurrence under the row lock', () => {
  test("two first claims of one slot, the second waiting on the first's insert until its 20 ms lease ran out: one run", {
    timeout: 30_000,
  }, async () => {
    const table = await freshTable(pool, 'arbiter')
    // The first insert holds its transaction 300 ms after writing the row, so a racer's insert waits
    // on it, and finds the lease over when it gets the row.
    await pool.query(`CREATE FUNCTION ${table}_slow() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(0.3); RETURN NEW; END $$`)
    await pool.query(
      `CREATE TRIGGER slow AFTER INSERT ON ${quoteTable(table)} FOR EACH ROW EXECUTE FUNCTION ${table}_slow()`,
    )
    const slot = Math.floor(Date.now() / 60_000) * 60_000
    for (let round = 0; round < 3; round++) {
      const job = `race-${round}`
      const runs: string[] = []
      const claim = (holder: string) =>
        withCronLease(pool, job, 20, () => void runs.push(holder), { table, holder, occurrence: new Date(slot) })
      const first = claim('first')
      await new Promise((resolve) => setTimeout(resolve, 50))
      await Promise.all([first, claim('second')])
      assert.deepEqual(runs, ['first'], `round ${round}: the slot ran once`)
    }
  })
})

describe('a catch-up never runs a slot not later than the last one claimed', () => {
  test('a row whose due time passed unclaimed, but whose last occurrence is already the slot due: nothing runs', async () => {
    const table = await freshTable(pool, 'catchup_recheck')
    const every = 60_000
    await withCronLease(pool, 'job', 1, () => {}, { table, everyMs: every })
    // Due 30 s ago, with no claim since by claimed_at; yet the slot due is already claimed (a claim
    // of it, or a later one, was made by another writer of the row).
    await pool.query(
      `UPDATE ${quoteTable(table)} SET claimed_at = clock_timestamp() - interval '90 seconds',
         lease_until = clock_timestamp() - interval '1 second',
         next_due_at = clock_timestamp() - interval '30 seconds',
         next_occurrence = date_trunc('second', clock_timestamp() - interval '30 seconds'),
         last_occurrence = date_trunc('second', clock_timestamp() - interval '30 seconds'),
         every_ms = $1::float8
       WHERE job_name = 'job'`,
      [every],
    )
    let ran = 0
    const outcome = await catchUp(pool, 'job', 50_000, () => ran++, { table, withinMs: 10 * every, everyMs: every })
    assert.deepEqual([outcome.ran, ran], [false, 0])
    // The same row with the occurrence one slot earlier is made up for: the re-check alone stopped it.
    await pool.query(
      `UPDATE ${quoteTable(table)} SET last_occurrence = last_occurrence - interval '60 seconds' WHERE job_name = 'job'`,
    )
    assert.equal(
      (await catchUp(pool, 'job', 50_000, () => ran++, { table, withinMs: 10 * every, everyMs: every })).ran,
      true,
    )
    assert.equal(ran, 1)
  })
})
