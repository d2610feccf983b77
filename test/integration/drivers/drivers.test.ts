/**
 * The driver matrix: the same core cases (test/helpers/driver-cases.ts) against every driver the
 * README lists as tested. Each entry is the recipe a user would copy.
 *
 * | driver                         | how the Queryable is made                         | sessions |
 * | ------------------------------ | ------------------------------------------------- | -------- |
 * | pg Pool                        | the pool itself                                   | many     |
 * | pg Client                      | the connected client itself                       | many     |
 * | pg PoolClient                  | `await pool.connect()`, released afterwards       | many     |
 * | pg transaction client          | a client between BEGIN and COMMIT/ROLLBACK        | many     |
 * | PGlite (in memory)             | the PGlite instance itself                        | one      |
 * | postgres.js                    | `fromPostgresJs(sql)`                             | many     |
 * | Drizzle (node-postgres)        | `db.$client`, the pg Pool under Drizzle           | many     |
 * | Knex (pg)                      | `fromKnex(knex)`, a small adapter over knex.raw   | many     |
 *
 * PGlite is one session: the race case sends ten claims at once through it (they queue), since
 * there is no second connection to race from.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { PGlite } from '@electric-sql/pglite'
import { drizzle } from 'drizzle-orm/node-postgres'
import knexFactory from 'knex'
import pg from 'pg'
import postgres from 'postgres'
import { freshTable, testDatabaseUrl } from '../../../dev/postgres.ts'
import { fromPostgresJs, withCronLease } from '../../../src/index.ts'
import { type Claimant, type Driver, direct, driverCases, type Session } from '../../helpers/driver-cases.ts'
import { fromKnex } from '../../helpers/recipes.ts'

/** A driver on the test server: an admin pool for setup and inspection, and how to open a claimant. */
async function onServer(open: (url: string) => Promise<Session>, shared?: { end(): Promise<void> }) {
  const url = await testDatabaseUrl()
  const admin = new pg.Pool({ connectionString: url, max: 3 })
  return {
    admin,
    open: () => open(url),
    async stop() {
      await shared?.end()
      await admin.end()
    },
  }
}

const drivers: Driver[] = [
  {
    name: 'pg Pool',
    sessions: 'many',
    start: () =>
      onServer(async (url) => {
        const pool = new pg.Pool({ connectionString: url, max: 2 })
        return { claimant: direct(pool), close: () => pool.end() }
      }),
  },
  {
    name: 'pg Client',
    sessions: 'many',
    start: () =>
      onServer(async (url) => {
        const client = new pg.Client({ connectionString: url })
        await client.connect()
        return { claimant: direct(client), close: () => client.end() }
      }),
  },
  {
    name: 'pg PoolClient (checked out)',
    sessions: 'many',
    async start() {
      const pool = new pg.Pool({ connectionString: await testDatabaseUrl(), max: 12 })
      return onServer(async () => {
        const client = await pool.connect()
        return { claimant: direct(client), close: () => client.release() }
      }, pool)
    },
  },
  {
    name: 'pg transaction client (BEGIN … COMMIT, ROLLBACK on error)',
    sessions: 'many',
    transactional: true,
    async start() {
      const pool = new pg.Pool({ connectionString: await testDatabaseUrl(), max: 12 })
      return onServer(async () => {
        const client = await pool.connect()
        const claimant: Claimant = {
          db: client,
          async lease(jobName, leaseMs, tick, opts) {
            await client.query('BEGIN')
            try {
              const outcome = await withCronLease(client, jobName, leaseMs, tick, opts)
              await client.query('COMMIT')
              return outcome
            } catch (error) {
              await client.query('ROLLBACK')
              throw error
            }
          },
        }
        return { claimant, close: () => client.release() }
      }, pool)
    },
  },
  {
    name: 'PGlite (in memory)',
    sessions: 'one',
    async start() {
      const db = new PGlite()
      return { admin: db, open: async () => ({ claimant: direct(db), close() {} }), stop: () => db.close() }
    },
  },
  {
    name: 'postgres.js through fromPostgresJs',
    sessions: 'many',
    start: () =>
      onServer(async (url) => {
        const sql = postgres(url, { max: 1, onnotice: () => {} })
        return { claimant: direct(fromPostgresJs(sql)), close: () => sql.end({ timeout: 5 }) }
      }),
  },
  {
    name: 'Drizzle (node-postgres) through db.$client',
    sessions: 'many',
    start: () =>
      onServer(async (url) => {
        const db = drizzle({ connection: { connectionString: url, max: 2 } })
        return { claimant: direct(db.$client), close: () => db.$client.end() }
      }),
  },
  {
    name: 'Knex (pg) through an adapter over knex.raw',
    sessions: 'many',
    start: () =>
      onServer(async (url) => {
        const knex = knexFactory({ client: 'pg', connection: url, pool: { min: 0, max: 2 } })
        return { claimant: direct(fromKnex(knex)), close: () => knex.destroy() }
      }),
  },
]

for (const driver of drivers) driverCases(driver)

describe('a Knex whose postProcessResponse renames result columns', () => {
  test('still claims, but hides the claim token, so renew rejects instead of guessing', async () => {
    const url = await testDatabaseUrl()
    const admin = new pg.Pool({ connectionString: url, max: 1 })
    const camel = (key: string) => key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())
    const knex = knexFactory({
      client: 'pg',
      connection: url,
      pool: { min: 0, max: 1 },
      // A common setup: camelCase every column name in every result, raw ones included.
      postProcessResponse: (result) => {
        if (!Array.isArray(result?.rows)) return result
        const rows = result.rows.map((row: Record<string, unknown>) =>
          Object.fromEntries(Object.entries(row).map(([k, v]) => [camel(k), v])),
        )
        return { ...result, rows }
      },
    })
    try {
      const table = await freshTable(admin, 'drv_camel')
      const outcome = await withCronLease(
        fromKnex(knex),
        'camel',
        60_000,
        async (ctx) => ({ token: ctx.claimToken, renew: await ctx.renew().catch((error: Error) => error) }),
        { table },
      )
      assert.equal(outcome.ran, true)
      assert.equal(outcome.result?.token, null)
      assert.ok(outcome.result?.renew instanceof TypeError)
      assert.match(outcome.result.renew.message, /cannot renew the lease for 'camel'/)
      await admin.query(`DROP TABLE "${table}"`)
    } finally {
      await knex.destroy()
      await admin.end()
    }
  })
})
