/** The lease table's DDL: `sql` prints it without a database or `pg`; `migrate` creates or upgrades the table. */
import type pg from 'pg'
import type { Paint } from '../human.js'
import { createTableSql, historyTableOf, TABLE_FACTS_SQL, tableFactsParams, upgradeTableSql } from '../sql.js'
import { BIN, type Command, DATABASE_EXIT } from './args.js'

export const sql: Command = {
  summary: 'Print the CREATE TABLE statement for the lease table',
  options: ['table'],
  details:
    'Prints the DDL for a migration tool or psql; it does not connect to a database.\n\n' +
    'Examples:\n' +
    `  ${BIN} sql > migrations/001_cron_leases.sql\n` +
    `  ${BIN} sql --table jobs.cron_leases | psql "$DATABASE_URL"`,
  exitCodes: '0 printed, 2 usage error',
  async run(values, context) {
    context.out(createTableSql(values.table))
  },
}

export const migrate: Command = {
  summary: 'Create the lease table, or upgrade an older one (safe to run again, and at once)',
  options: ['table', 'url'],
  details:
    'Creates the table if it does not exist, then adds the columns for outcomes, pauses and\n' +
    'occurrence keys, and the run history table beside it (<table>_runs), if they are missing (what\n' +
    'upgradeTableSql() does); a table that is up to date is left as it is, and needs no CREATE or\n' +
    'ALTER privilege. Many replicas may run it at the same time.\n' +
    'The schema of a schema.name table must already exist.\n\n' +
    'Examples:\n' +
    `  ${BIN} migrate --url postgres://app@db.internal:5432/app\n` +
    `  DATABASE_URL=postgres://localhost/app ${BIN} migrate --table jobs.cron_leases`,
  exitCodes: `0 created, upgraded or already up to date, ${DATABASE_EXIT}, 2 usage error`,
  async run({ table }, context) {
    const migration = await context.connect(async (client, target) => {
      const before = await factsOf(client, table)
      await client.query(createTableSql(table))
      await client.query(upgradeTableSql(table))
      const after = await factsOf(client, table)
      return { table, where: target.label, before: before.columns, after: after.columns ?? 0, history: !before.history }
    })
    context.out(describeMigration(migration, context.paint))
  },
}

// What migrate found and did: the table's columns before (null: no table) and after; history: the run history table was made.
type Migration = { table: string; where: string; before: number | null; after: number; history: boolean }

export function describeMigration({ table, where, before, after, history }: Migration, paint: Paint): string {
  const runs = `its run history ${historyTableOf(table)}`
  if (before === null) return `${paint.green('Created')} table ${table} and ${runs} in ${where}.\n`
  if (after > before || history) {
    const added = after - before
    const done = [
      added > 0 &&
        `added ${added} ${added === 1 ? 'column' : 'columns'} for outcomes, pauses, occurrence keys and the history`,
      history && `created ${runs}`,
    ]
    return `${paint.green('Upgraded')} table ${table} in ${where}: ${done.filter(Boolean).join(', and ')}.\n`
  }
  return `Table ${table} already exists in ${where} and is up to date; nothing to do.\n`
}

// columns: null when there is no table. history: whether the history table exists, whatever this role may do with it.
async function factsOf(client: pg.Client, table: string): Promise<{ columns: number | null; history: boolean }> {
  const { rows } = await client.query(TABLE_FACTS_SQL, tableFactsParams(table))
  return { columns: rows[0].exists ? rows[0].columns : null, history: rows[0].history_table === true }
}
