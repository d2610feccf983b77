/** The lease table's DDL: `sql` prints it without a database or `pg`; `migrate` creates or upgrades the table. */
import type pg from 'pg'
import { createTableSql, tableFactsParams, tableFactsSql, upgradeTableSql } from '../sql.js'
import { BIN, type Command, DATABASE_EXIT } from './args.js'
import { EXIT } from './exit.js'
import type { Paint } from './human.js'

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
    return EXIT.OK
  },
}

export const migrate: Command = {
  summary: 'Create the lease table, or upgrade an older one (safe to run again, and at once)',
  options: ['table', 'url'],
  details:
    'Creates the table if it does not exist, then adds the columns for outcomes, pauses and\n' +
    'occurrence keys if they are missing (what upgradeTableSql() does); a table that is up to date is left\n' +
    'as it is, and needs no CREATE or ALTER privilege. Many replicas may run it at the same time.\n' +
    'The schema of a schema.name table must already exist.\n\n' +
    'Examples:\n' +
    `  ${BIN} migrate --url postgres://app@db.internal:5432/app\n` +
    `  DATABASE_URL=postgres://localhost/app ${BIN} migrate --table jobs.cron_leases`,
  exitCodes: `0 created, upgraded or already up to date, ${DATABASE_EXIT}, 2 usage error`,
  async run({ table }, context) {
    const migration = await context.connect(async (client, target) => {
      const before = await columnsOf(client, table)
      await client.query(createTableSql(table))
      await client.query(upgradeTableSql(table))
      const after = (await columnsOf(client, table)) ?? 0
      return { table, where: target.label, before, after }
    })
    context.out(describeMigration(migration, context.paint))
    return EXIT.OK
  },
}

/** What migrate found and did: the table's columns before (null: no table) and after. */
export interface Migration {
  table: string
  where: string
  before: number | null
  after: number
}

/** The line migrate prints: created, upgraded (with how many columns it added) or up to date. */
export function describeMigration({ table, where, before, after }: Migration, paint: Paint): string {
  if (before === null) return `${paint.green('Created')} table ${table} in ${where}.\n`
  if (after > before) {
    const added = after - before
    return `${paint.green('Upgraded')} table ${table} in ${where}: added ${added} ${added === 1 ? 'column' : 'columns'} for outcomes, pauses and occurrence keys.\n`
  }
  return `Table ${table} already exists in ${where} and is up to date; nothing to do.\n`
}

async function columnsOf(client: pg.Client, table: string): Promise<number | null> {
  const { rows } = await client.query(tableFactsSql(), tableFactsParams(table))
  return rows[0].exists ? rows[0].columns : null
}
