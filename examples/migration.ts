/**
 * Creating the lease table in a migration instead of at startup, with node-pg-migrate (any
 * migration tool works: the migration runs CRON_LEASES_TABLE_SQL, the same text as
 * sql/cron_leases.sql). The migration file is examples/migrations/1764460800000_cron-leases.ts.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/migration.ts
 *
 * Running it again applies nothing: node-pg-migrate records what it ran.
 */
import { fileURLToPath } from 'node:url'
import { runner } from 'node-pg-migrate'
import pg from 'pg'

const applied = await runner({
  databaseUrl: process.env.DATABASE_URL ?? '',
  dir: fileURLToPath(new URL('./migrations', import.meta.url)),
  direction: 'up',
  migrationsTable: 'pgmigrations_example',
  log: () => {},
})
console.log(`applied ${applied.length} migration(s)${applied.map((m) => ` ${m.name}`).join('')}`)

const client = new pg.Client({ connectionString: process.env.DATABASE_URL })
await client.connect()
const { rows } = await client.query(`SELECT to_regclass('cron_leases') IS NOT NULL AS ready`)
await client.end()
console.log(rows[0].ready ? 'cron_leases is ready' : 'cron_leases is missing')
