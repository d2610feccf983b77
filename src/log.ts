/** Where warnings go, each said once per table until its condition ends, and the table's own warning. */
import { DEFAULT_TABLE } from './sql.js'
import type { LeaseLogger } from './types.js'

// Per table (at most TABLES, the first added goes first), the jobs or topics warned about.
const TABLES = 100
const warned = new Map<string, Set<string>>()

/** True once per table per process for a warning about a job or topic, until {@link clearWarning}. */
export function firstWarning(table: string, about: string): boolean {
  let given = warned.get(table)
  if (given === undefined) {
    if (warned.size >= TABLES) warned.delete(warned.keys().next().value as string)
    given = new Set()
    warned.set(table, given)
  }
  if (given.has(about)) return false
  given.add(about)
  return true
}

/** Ends a condition {@link firstWarning} allowed a warning about. */
export function clearWarning(table: string, about: string): void {
  warned.get(table)?.delete(about)
}

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
