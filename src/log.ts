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

export function clearWarning(table: string, about: string): void {
  warned.get(table)?.delete(about)
}

// Never silent (a warning nobody sees makes a silent miss again), and never throws: a logger cannot change a run.
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

// The message is built only for a logger that has `debug`: every losing claim passes here.
export function debug(logger: LeaseLogger | undefined, message: () => string): void {
  if (typeof logger?.debug !== 'function') return
  try {
    logger.debug(message())
  } catch {
    // A debug line must not change a claim's outcome, and is not worth the console.
  }
}

export function migrateCommand(table: string): string {
  return `pg-cron-lease migrate${table === DEFAULT_TABLE ? '' : ` --table ${table}`}`
}

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
