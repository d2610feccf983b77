import type { MigrationBuilder } from 'node-pg-migrate'
import { CRON_LEASES_TABLE_SQL } from 'pg-cron-lease'

export const up = (pgm: MigrationBuilder): void => {
  pgm.sql(CRON_LEASES_TABLE_SQL)
}

// Dropping the table forgets every lease: replicas may then run the current occurrence again.
export const down = (pgm: MigrationBuilder): void => {
  pgm.dropTable('cron_leases_runs')
  pgm.dropTable('cron_leases')
}
