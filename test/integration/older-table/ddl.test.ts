import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { CRON_LEASES_TABLE_SQL, createTableSql, upgradeTableSql, withCronLease } from '../../../src/index.ts'
import { finished } from '../../helpers/child.ts'

// The columns of the current shape: the four of the original table and the optional ones.
const COLUMNS = CRON_LEASES_TABLE_SQL.match(/^ {6}[a-z_]+ +[A-Z]/gm)!.length

const CLI = fileURLToPath(new URL('../../../src/cli.ts', import.meta.url))
const ORIGINAL_SHAPE = (table: string) =>
  `CREATE TABLE ${table} (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL, holder TEXT,
     claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`

let admin: pg.Pool
let url: string

before(async () => {
  url = await testDatabaseUrl()
  admin = await testPool()
})
after(() => admin.end())

const freshSchema = async () => {
  const schema = `ddl_${randomBytes(4).toString('hex')}`
  await admin.query(`CREATE SCHEMA ${schema}`)
  return schema
}

/** Runs `sql` on `count` separate connections released at the same instant; each result or error. */
async function race(count: number, sql: (i: number) => string, connectionString = url) {
  const clients = await Promise.all(
    Array.from({ length: count }, async () => {
      const client = new pg.Client({ connectionString })
      await client.connect()
      return client
    }),
  )
  try {
    return await Promise.allSettled(clients.map((client, i) => client.query(sql(i))))
  } finally {
    await Promise.all(clients.map((client) => client.end()))
  }
}

const failures = (results: PromiseSettledResult<unknown>[]) =>
  results.flatMap((r) => (r.status === 'rejected' ? [`${(r.reason as { code?: string }).code}: ${r.reason}`] : []))

const columns = async (schema: string, table: string) =>
  (
    await admin.query(
      'SELECT count(*)::int AS n FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2',
      [schema, table],
    )
  ).rows[0].n

describe('the start-up DDL is safe when every replica runs it at once', () => {
  test('eight replicas creating the table on an empty database, twenty times: all succeed', async () => {
    for (let round = 0; round < 20; round++) {
      const schema = await freshSchema()
      const results = await race(8, () => `SET search_path = ${schema}; ${CRON_LEASES_TABLE_SQL}`)
      assert.deepEqual(failures(results), [], `round ${round}`)
      assert.equal(await columns(schema, 'cron_leases'), COLUMNS)
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    }
  })

  test('eight replicas upgrading a table of the original shape at once: all succeed, once', async () => {
    for (let round = 0; round < 5; round++) {
      const schema = await freshSchema()
      await admin.query(ORIGINAL_SHAPE(`${schema}.leases`))
      const results = await race(8, () => upgradeTableSql(`${schema}.leases`))
      assert.deepEqual(failures(results), [], `round ${round}`)
      assert.equal(await columns(schema, 'leases'), COLUMNS)
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    }
  })

  test('three `pg-cron-lease migrate` processes at once on an empty database all exit 0', async () => {
    const schema = await freshSchema()
    const runs = await Promise.all(
      [0, 1, 2].map(() =>
        finished(
          spawn(process.execPath, ['--import', 'tsx', CLI, 'migrate', '--table', `${schema}.leases`], {
            env: { ...process.env, DATABASE_URL: url, NO_COLOR: '1' },
          }),
        ),
      ),
    )
    for (const run of runs) assert.equal(run.code, 0, run.stderr)
    assert.equal(runs.filter((r) => /^Created table/.test(r.stdout)).length >= 1, true)
    assert.equal(await columns(schema, 'leases'), COLUMNS)
    await admin.query(`DROP SCHEMA ${schema} CASCADE`)
  })
})

describe('a role that may only use the table can run the DDL once the table exists', () => {
  test('createTableSql, upgradeTableSql and migrate succeed without CREATE on the schema', async () => {
    const schema = await freshSchema()
    const role = `ddl_user_${randomBytes(4).toString('hex')}`
    const table = `${schema}.leases`
    await admin.query(createTableSql(table))
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'ddl'`)
    await admin.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
    await admin.query(`GRANT SELECT, INSERT, UPDATE ON ${table} TO ${role}`)
    const asRole = new URL(url)
    asRole.username = role
    asRole.password = 'ddl'
    try {
      const user = new pg.Pool({ connectionString: asRole.href, max: 2 })
      try {
        await assert.rejects(user.query(`CREATE TABLE ${schema}.probe (x int)`), { code: '42501' }, 'no CREATE')
        await user.query(createTableSql(table))
        await user.query(upgradeTableSql(table))
        assert.equal((await withCronLease(user, 'job', 1000, () => 'ran', { table })).ran, true)
      } finally {
        await user.end()
      }
      const migrate = await finished(
        spawn(process.execPath, ['--import', 'tsx', CLI, 'migrate', '--table', table], {
          env: { ...process.env, DATABASE_URL: asRole.href, NO_COLOR: '1' },
        }),
      )
      assert.equal(migrate.code, 0, migrate.stderr)
      assert.match(migrate.stdout, /already exists .* up to date; nothing to do/)
    } finally {
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
      await admin.query(`DROP OWNED BY ${role}`)
      await admin.query(`DROP ROLE ${role}`)
    }
  })

  test('sql/cron_leases.sql and sql/cron_leases_upgrade.sql run as they are, twice', async () => {
    const schema = await freshSchema()
    const file = (name: string) => readFileSync(new URL(`../../../sql/${name}`, import.meta.url), 'utf8')
    const client = await admin.connect()
    try {
      await client.query(`SET search_path = ${schema}`)
      for (let i = 0; i < 2; i++) {
        await client.query(file('cron_leases.sql'))
        await client.query(file('cron_leases_upgrade.sql'))
      }
      assert.equal(await columns(schema, 'cron_leases'), COLUMNS)
    } finally {
      await client.query('RESET search_path')
      client.release()
      await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    }
  })
})
