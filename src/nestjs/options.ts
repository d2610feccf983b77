/** The module's options, their tokens, and the one step that turns them into the config. */
import { inspect } from 'node:util'
import { Logger, type LoggerService } from '@nestjs/common'
import { compileOptions } from '../options.js'
import { createTableSql, quoteTable, upgradeTableSql } from '../sql.js'
import type { LeaseLogger, LeaseOptions, Queryable } from '../types.js'

/**
 * Options of `PgCronLeaseModule.forRoot()`; `table`, `holder`, `record` and `history` are every leased method's defaults.
 *
 * @example
 * const opts: PgCronLeaseModuleOptions = { db: pool, migrate: true, holder: process.env.HOSTNAME }
 */
export interface PgCronLeaseModuleOptions extends Pick<LeaseOptions, 'table' | 'holder' | 'record' | 'history'> {
  /** The database: a `pg.Pool`, or any `Queryable` the core accepts. The module never ends it. */
  db: Queryable
  /** Where claim errors, tick errors and warnings go. Default: Nest's `new Logger('PgCronLease')`. */
  logger?: LoggerService
  /** Create or upgrade the table at start, as `pg-cron-lease migrate` does. Default: `false`. */
  migrate?: boolean
  /** How long shutdown waits for ticks in flight, in ms. Default: {@link DEFAULT_SHUTDOWN_TIMEOUT_MS}. */
  shutdownTimeoutMs?: number
}

/**
 * How long shutdown waits for ticks in flight by default: 10 s, a third of Kubernetes' grace.
 *
 * @example
 * PgCronLeaseModule.forRoot({ db: pool, shutdownTimeoutMs: DEFAULT_SHUTDOWN_TIMEOUT_MS * 2 })
 */
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 10_000

export const PG_CRON_LEASE_CONFIG = Symbol('pg-cron-lease:config')

/** The options checked, defaults filled: what the runner and the health indicator read. */
export type ModuleConfig = Awaited<ReturnType<typeof resolveConfig>>

// The value cut at 80 characters, so a pool in the message stays one short line.
export function badOption(owner: string, name: string, rule: string, value: unknown, depth = 0): never {
  const text = inspect(value, { depth, breakLength: Number.POSITIVE_INFINITY })
  const shown = text.length > 80 ? `${text.slice(0, 80)}…` : text
  throw new TypeError(`pg-cron-lease: ${owner} ${name} must ${rule}, got ${shown}`)
}

export function checkKeys(owner: string, options: object, keys: readonly string[]): void {
  const extra = Object.keys(options).find((key) => !keys.includes(key))
  if (extra !== undefined) {
    throw new TypeError(`pg-cron-lease: ${owner} has no option ${JSON.stringify(extra)} (it takes ${keys.join(', ')})`)
  }
}

/** Checks the options (a `TypeError` stops the start), fills the defaults, migrates when asked. */
export async function resolveConfig(options: unknown) {
  const owner = 'PgCronLeaseModule'
  if (typeof options !== 'object' || options === null) badOption(owner, 'options', 'be an object', options)
  checkKeys(owner, options, ['db', 'table', 'holder', 'logger', 'record', 'history', 'migrate', 'shutdownTimeoutMs'])
  const { db, table, holder, record, history, logger, migrate, shutdownTimeoutMs } = options as PgCronLeaseModuleOptions
  if (typeof (db as Queryable | undefined)?.query !== 'function') {
    badOption(owner, 'db', 'have a query(text, params) method', db)
  }
  if (table !== undefined) quoteTable(table)
  if (migrate !== undefined && typeof migrate !== 'boolean') badOption(owner, 'migrate', 'be a boolean', migrate)
  if (shutdownTimeoutMs !== undefined && !(Number.isFinite(shutdownTimeoutMs) && shutdownTimeoutMs >= 0)) {
    badOption(owner, 'shutdownTimeoutMs', 'be a number of ms, 0 or more', shutdownTimeoutMs)
  }
  if (logger != null && (typeof logger.error !== 'function' || typeof logger.warn !== 'function')) {
    badOption(owner, 'logger', 'be a Nest LoggerService', logger)
  }
  if (migrate === true) {
    await db.query(createTableSql(table), [])
    await db.query(upgradeTableSql(table), [])
  }
  const nestLogger = logger ?? new Logger('PgCronLease')
  const leaseLogger: LeaseLogger = {
    debug: (text) => nestLogger.debug?.(text),
    warn: (text) => nestLogger.warn(text),
    error: (error, jobName) => {
      const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error)
      nestLogger.error(`${jobName}: ${text}`, error instanceof Error ? error.stack : undefined)
    },
  }
  // Checked as every claim checks it, so a bad one stops the start, not each fire.
  if (history !== undefined) compileOptions('withCronLease', { history })
  const defaults = Object.entries({ table, holder, record, history }).filter(([, value]) => value !== undefined)
  return Object.freeze({
    db,
    logger: nestLogger,
    leaseLogger,
    defaults: Object.freeze(
      Object.fromEntries(defaults) as Pick<LeaseOptions, 'table' | 'holder' | 'record' | 'history'>,
    ),
    shutdownTimeoutMs: shutdownTimeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS,
  })
}
