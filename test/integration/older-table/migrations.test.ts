/**
 * The migration recipes, run with the real tools against a fresh database on the test server:
 * up creates the lease table, a lease can be claimed in it, down drops it.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import knexFactory from 'knex'
import { runner } from 'node-pg-migrate'
import pg from 'pg'
import { testDatabaseUrl } from '../../../dev/postgres.ts'
import { withCronLease } from '../../../src/index.ts'
import { fromKnex } from '../../helpers/recipes.ts'

const fixtures = (tool: string) => fileURLToPath(new URL(`../../fixtures/migrations/${tool}`, import.meta.url))

let admin: pg.Pool
const databases: string[] = []

before(async () => {
  admin = new pg.Pool({ connectionString: await testDatabaseUrl(), max: 2 })
})
after(async () => {
  for (const name of databases) await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)
  await admin.end()
})

/** A new, empty database on the test server, so a migration's `cron_leases` touches nothing else. */
async function freshDatabase(): Promise<string> {
  const name = `mig_${randomBytes(5).toString('hex')}`
  await admin.query(`CREATE DATABASE "${name}"`)
  databases.push(name)
  const url = new URL(await testDatabaseUrl())
  url.pathname = `/${name}`
  return url.toString()
}

async function tableExists(db: pg.Pool | pg.Client, name: string): Promise<boolean> {
  const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS present', [name])
  return rows[0].present
}

async function claimTwice(db: Parameters<typeof withCronLease>[0]) {
  return [
    await withCronLease(db, 'migrated', 60_000, () => 'first', { holder: 'a' }),
    await withCronLease(db, 'migrated', 60_000, () => 'second', { holder: 'b' }),
  ]
}

describe('the lease table can be created and dropped by the migration tools people use', () => {
  test('node-pg-migrate: up creates cron_leases from the exported DDL, a lease is claimed, down drops it and its history', async () => {
    const databaseUrl = await freshDatabase()
    const options = { databaseUrl, dir: fixtures('node-pg-migrate'), migrationsTable: 'pgmigrations', log() {} }
    const up = await runner({ ...options, direction: 'up' })
    assert.deepEqual(
      up.map((m) => m.name),
      ['1764460800000_cron-leases'],
    )
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 })
    try {
      assert.deepEqual(await claimTwice(pool), [
        { ran: true, result: 'first' },
        { ran: false, result: null },
      ])
      const down = await runner({ ...options, direction: 'down' })
      assert.equal(down.length, 1)
      assert.equal(await tableExists(pool, 'cron_leases'), false)
      assert.equal(await tableExists(pool, 'cron_leases_runs'), false, 'its history goes with it')
    } finally {
      await pool.end()
    }
  })

  test('Knex migrations: latest creates cron_leases, a lease is claimed through knex, down drops it and its history', async () => {
    const knex = knexFactory({
      client: 'pg',
      connection: await freshDatabase(),
      pool: { min: 0, max: 2 },
      migrations: { directory: fixtures('knex'), loadExtensions: ['.ts'] },
    })
    try {
      const [, applied] = await knex.migrate.latest()
      assert.deepEqual(applied, ['20251130000000_cron_leases.ts'])
      assert.deepEqual(await claimTwice(fromKnex(knex)), [
        { ran: true, result: 'first' },
        { ran: false, result: null },
      ])
      const [, reverted] = await knex.migrate.down()
      assert.deepEqual(reverted, ['20251130000000_cron_leases.ts'])
      const { rows } = await knex.raw(
        "SELECT to_regclass('cron_leases') IS NOT NULL AS present, to_regclass('cron_leases_runs') IS NOT NULL AS history",
      )
      assert.deepEqual(rows, [{ present: false, history: false }])
    } finally {
      await knex.destroy()
    }
  })
})
