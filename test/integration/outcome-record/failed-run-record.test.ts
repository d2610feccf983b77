/**
 * A failed run is never reported as healthy: whatever its error holds, the row says 'error', with
 * one clean line of text, on any server encoding.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import pg from 'pg'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { createTableSql, listLeases, withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
let table: string
let job = 0
const nextJob = () => `failed-run-${++job}`
const quiet = { warn() {}, debug() {} }

before(async () => {
  pool = await testPool({ max: 4 })
  table = await freshTable(pool, 'failed_run')
})
after(async () => {
  await pool.end()
})

async function fail(db: pg.Pool, tableName: string, jobName: string, error: unknown, warnings: string[] = []) {
  await assert.rejects(
    withCronLease(db, jobName, 60_000, () => Promise.reject(error), {
      table: tableName,
      logger: { warn: (m: string) => warnings.push(m) },
    }),
  )
  return (await listLeases(db, { table: tableName })).find((lease) => lease.jobName === jobName)!
}

describe('a failed run is recorded as failed, whatever its error holds', () => {
  test('a NUL in the message or the name: the row says error, not the last run’s ok', async () => {
    const jobName = nextJob()
    await withCronLease(pool, jobName, 60_000, () => 'fine', { table, logger: quiet })
    await expireLease(pool, table, jobName)
    const warnings: string[] = []
    const error = Object.assign(new Error('bad\0byte'), { name: 'Nul\0Name' })
    const row = await fail(pool, table, jobName, error, warnings)
    assert.equal(row.lastOutcome, 'error')
    assert.equal(row.lastError, 'Nul Name: bad byte')
    assert.deepEqual(warnings, [])
  })

  test('text the server encoding cannot hold is recorded again in ASCII: still error, never ok', async () => {
    const database = `latin1_${randomBytes(4).toString('hex')}`
    await pool.query(`CREATE DATABASE ${database} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`)
    const url = new URL(await testDatabaseUrl())
    url.pathname = `/${database}`
    const latin1 = new pg.Pool({ connectionString: url.href, max: 2 })
    try {
      await latin1.query(createTableSql('cron_leases'))
      const jobName = nextJob()
      await withCronLease(latin1, jobName, 60_000, () => 'fine', { logger: quiet })
      await expireLease(latin1, 'cron_leases', jobName)
      const warnings: string[] = []
      const row = await fail(latin1, 'cron_leases', jobName, new Error('disk 💥 full'), warnings)
      assert.equal(row.lastOutcome, 'error')
      assert.equal(row.lastError, 'Error: disk ? full')
      assert.equal(warnings.length, 1)
      assert.match(warnings[0] ?? '', /recorded in ASCII/)
    } finally {
      await latin1.end()
      await pool.query(`DROP DATABASE ${database}`)
    }
  })
})

describe('a missing lease table is named, with how to create it', () => {
  test('the claim rejects with an Error naming the table and migrate, the driver’s 42P01 as cause', async () => {
    const missing = `missing_${randomBytes(4).toString('hex')}`
    await assert.rejects(
      withCronLease(pool, 'job', 60_000, () => 'ran', { table: missing }),
      (e: unknown) =>
        e instanceof Error &&
        e.message.includes(`the lease table ${missing} does not exist`) &&
        e.message.includes(`pg-cron-lease migrate --table ${missing}`) &&
        (e.cause as { code?: string } | undefined)?.code === '42P01',
    )
  })
})
