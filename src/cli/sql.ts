/**
 * `pg-cron-lease sql`: the CREATE TABLE statement for a migration tool or psql, printed without a
 * database (and without the `pg` driver).
 */
import { createTableSql } from '../sql.js'
import { BIN } from './args.js'
import type { Command } from './command.js'
import { EXIT } from './exit.js'

/** The `sql` command. */
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
