import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { installSkew } from '../../../dev/skew-clock.ts'
import { createTableSql, type LeaseInfo, listLeases, quoteTable, withCronLease } from '../../../src/index.ts'

const ISO_MICROS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/

/** Microseconds since the epoch of an ISO-8601 UTC text with microseconds, exactly. */
function micros(iso: string): bigint {
  assert.match(iso, ISO_MICROS)
  return BigInt(Date.parse(`${iso.slice(0, 19)}Z`)) * 1000n + BigInt(iso.slice(20, 26))
}

let pool: pg.Pool
before(async () => {
  pool = await testPool()
})
after(async () => {
  await pool.end()
})

/** Claims `jobName` for `leaseMs` and returns the claim token the tick saw. */
async function claim(table: string, jobName: string, leaseMs: number, holder: string): Promise<string> {
  const outcome = await withCronLease(pool, jobName, leaseMs, (ctx) => ctx.claimToken, { table, holder })
  assert.equal(outcome.ran, true, `the claim for ${jobName} should win`)
  return outcome.result!
}

async function expire(table: string, jobName: string) {
  await pool.query(`UPDATE "${table}" SET lease_until = clock_timestamp() - interval '2 seconds' WHERE job_name = $1`, [
    jobName,
  ])
}

describe('listLeases reports each lease as the database clock sees it', () => {
  test('an empty table lists nothing', async () => {
    const table = await freshTable(pool, 'inspect')
    assert.deepEqual(await listLeases(pool, { table }), [])
  })

  test('held and expired leases: held and remainingMs agree with the timestamps at checkedAt', async () => {
    const table = await freshTable(pool, 'inspect')
    const heldToken = await claim(table, 'billing:hourly', 60_000, 'web-1')
    const expiredToken = await claim(table, 'report:daily', 60_000, 'web-2')
    await expire(table, 'report:daily')

    const leases = await listLeases(pool, { table })
    assert.deepEqual(
      leases.map((l) => [l.jobName, l.holder, l.held, l.claimedAt]),
      [
        ['billing:hourly', 'web-1', true, heldToken],
        ['report:daily', 'web-2', false, expiredToken],
      ],
    )
    const [held, expired] = leases as [LeaseInfo, LeaseInfo]
    assert.equal(held.checkedAt, expired.checkedAt, 'every row is judged at one instant')

    // The held lease was claimed for 60 s; the claim's two clock_timestamp() reads differ by a few µs.
    const length = micros(held.leaseUntil) - micros(held.claimedAt)
    assert.ok(length > 59_990_000n && length <= 60_000_000n, `lease length ${length} µs`)
    const left = micros(held.leaseUntil) - micros(held.checkedAt)
    assert.ok(left > 0n)
    assert.equal(held.remainingMs, Number((left + 999n) / 1000n), 'remainingMs is the µs left, rounded up')
    assert.ok(held.remainingMs >= 1 && held.remainingMs <= 60_000)

    assert.ok(micros(expired.leaseUntil) < micros(expired.checkedAt))
    assert.equal(expired.remainingMs, 0)
  })

  test('held follows the expiry: a renewed lease shows its new time, an expired one frees the job', async () => {
    const table = await freshTable(pool, 'inspect')
    await claim(table, 'edge', 60_000, 'h')
    await pool.query(`UPDATE "${table}" SET lease_until = clock_timestamp() + interval '1 hour'`)
    const [far] = await listLeases(pool, { table })
    assert.equal(far!.held, true)
    assert.ok(far!.remainingMs > 3_500_000 && far!.remainingMs <= 3_600_000)
    await expire(table, 'edge')
    const [gone] = await listLeases(pool, { table })
    assert.deepEqual([gone!.held, gone!.remainingMs], [false, 0])
    // A claim now wins, agreeing with held: false.
    await claim(table, 'edge', 60_000, 'h2')
  })

  test('rows come in byte order of the job name, whatever the database collation', async () => {
    const table = await freshTable(pool, 'inspect')
    for (const name of ['b', 'a', 'Z', '_x', 'é', 'a:1']) await claim(table, name, 60_000, 'h')
    const leases = await listLeases(pool, { table })
    assert.deepEqual(
      leases.map((l) => l.jobName),
      ['Z', '_x', 'a', 'a:1', 'b', 'é'],
    )
    assert.equal(new Set(leases.map((l) => l.checkedAt)).size, 1, 'one clock reading for every row')
  })

  test('a row written without a holder lists holder null', async () => {
    const table = await freshTable(pool, 'inspect')
    await pool.query(
      `INSERT INTO "${table}" (job_name, lease_until) VALUES ('legacy', clock_timestamp() + interval '1 minute')`,
    )
    const [row] = await listLeases(pool, { table })
    assert.equal(row!.holder, null)
    assert.equal(row!.held, true)
  })

  test('a schema-qualified table is read, and the default table is cron_leases', async () => {
    await pool.query('CREATE SCHEMA IF NOT EXISTS inspect_schema')
    const table = `inspect_schema.q_${randomBytes(4).toString('hex')}`
    await pool.query(createTableSql(table))
    await claim(table, 'qualified', 60_000, 'h')
    assert.deepEqual(
      (await listLeases(pool, { table })).map((l) => l.jobName),
      ['qualified'],
    )
    // A temporary cron_leases shadows any public one for this session only, so the default is
    // proven without touching a table other test files may use.
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      await client.query(`CREATE TEMP TABLE cron_leases (LIKE ${quoteTable(table)} INCLUDING ALL)`)
      await withCronLease(client, 'default', 60_000, () => {}, { holder: 'h' })
      assert.deepEqual(
        (await listLeases(client)).map((l) => [l.jobName, l.holder, l.held]),
        [['default', 'h', true]],
      )
    } finally {
      await client.query('ROLLBACK')
      client.release()
    }
  })

  test("this process's clock plays no part: a replica an hour ahead sees the same answer", async () => {
    const table = await freshTable(pool, 'inspect')
    await claim(table, 'skewed', 60_000, 'h')
    const restore = installSkew(60 * 60 * 1000)
    let lease: LeaseInfo | undefined
    try {
      ;[lease] = await listLeases(pool, { table })
    } finally {
      restore()
    }
    assert.equal(lease!.held, true)
    assert.ok(lease!.remainingMs > 0 && lease!.remainingMs <= 60_000)
  })

  test('a missing table rejects with the driver error unchanged', async () => {
    await assert.rejects(listLeases(pool, { table: 'no_such_leases' }), { code: '42P01' })
  })
})
