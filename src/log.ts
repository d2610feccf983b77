/** Where warnings go, and the table's own: a leaf, so every module may warn without importing the claim path. */
import { DEFAULT_TABLE } from './sql.js'
import { firstWarning } from './state.js'
import type { LeaseLogger } from './types.js'

/**
 * `logger.warn`, else `console.warn`: a warning nobody sees would make a silent miss again. Never
 * throws: a logger's failure must not change what a run resolves to, nor whether it is recorded, so
 * a throwing `logger.warn` sends the warning to the console instead.
 */
export function warn(logger: LeaseLogger | undefined, message: string): void {
  if (typeof logger?.warn === 'function') {
    try {
      logger.warn(message)
      return
    } catch (error) {
      console.error('pg-cron-lease: logger.warn threw; the warning it was given follows:', error)
    }
  }
  console.warn(message)
}

/**
 * `logger.debug`, if any, with `message()`: built only for a logger that has one, as every losing
 * claim passes here. A throwing one is ignored: a debug line must not change a claim's outcome.
 */
export function debug(logger: LeaseLogger | undefined, message: () => string): void {
  if (typeof logger?.debug !== 'function') return
  try {
    logger.debug(message())
  } catch {
    // Nothing to fall back to: a debug line is not worth the console.
  }
}

/** The command that upgrades `table`, as an operator would type it. */
export function migrateCommand(table: string): string {
  return `pg-cron-lease migrate${table === DEFAULT_TABLE ? '' : ` --table ${table}`}`
}

/** Warns once per table that it has the original shape, so claims go by the lease alone and record nothing. */
export function warnShape(table: string, logger: LeaseLogger | undefined): void {
  if (!firstWarning(table, 'shape')) return
  warn(
    logger,
    `pg-cron-lease: ${table} has the original shape (it lacks columns of the current one), ` +
      'so it is used as the original package uses it: claims are decided by the lease alone (occurrences are not kept) and ' +
      `outcomes are not recorded; run \`${migrateCommand(table)}\` (or upgradeTableSql()) to upgrade it: replicas ` +
      'see it within a minute, with no restart',
  )
}
