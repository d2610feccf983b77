/**
 * The module's options: their declaration, the token they are provided under, and the one step
 * that turns a user's bag into the config every part of the module reads (checked, defaults filled,
 * the table migrated when asked).
 */
import { inspect } from 'node:util'
import { Logger, type LoggerService } from '@nestjs/common'
import { createTableSql, quoteTable, upgradeTableSql } from '../sql.js'
import type { LeaseLogger, LeaseOptions, Queryable } from '../types.js'

/**
 * Options of `PgCronLeaseModule.forRoot()` (and what `forRootAsync`'s factory returns). `table`,
 * `holder` and `record` are the core's options of the same names, the defaults of every leased
 * method of the application.
 *
 * @example
 * const opts: PgCronLeaseModuleOptions = { db: pool, migrate: true, holder: process.env.HOSTNAME }
 */
export interface PgCronLeaseModuleOptions extends Pick<LeaseOptions, 'table' | 'holder' | 'record'> {
  /** The database: a `pg.Pool`, or any `Queryable` the core accepts. The module never ends it. */
  db: Queryable
  /** Where claim errors, tick errors and warnings go. Default: Nest's `new Logger('PgCronLease')`. */
  logger?: LoggerService
  /**
   * Create the table, or add the columns an older one lacks, when the application starts (what
   * `pg-cron-lease migrate` does; safe from every replica at once). Default: `false`.
   */
  migrate?: boolean
  /**
   * How long shutdown waits for the ticks in flight, in ms, before it lets the application close
   * anyway (with a warning naming them). Default: {@link DEFAULT_SHUTDOWN_TIMEOUT_MS}.
   */
  shutdownTimeoutMs?: number
}

/** How long shutdown waits for the ticks in flight by default: 10 s, a third of Kubernetes' grace. */
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 10_000

/** The token the module's resolved config is provided under. */
export const PG_CRON_LEASE_CONFIG = Symbol('pg-cron-lease:config')

/** The token the user's options are provided under (forRoot's value, forRootAsync's factory). */
export const PG_CRON_LEASE_OPTIONS = Symbol('pg-cron-lease:options')

/** The options once checked, with every default filled: what the runner and the health indicator read. */
export interface ModuleConfig {
  readonly db: Queryable
  readonly logger: LoggerService
  /** The logger, as the core takes one. */
  readonly leaseLogger: LeaseLogger
  /** The core options every claim of the application sends. */
  readonly defaults: Readonly<Pick<LeaseOptions, 'table' | 'holder' | 'record'>>
  readonly shutdownTimeoutMs: number
}

const KEYS = new Set(['db', 'table', 'holder', 'logger', 'record', 'migrate', 'shutdownTimeoutMs'])

function shown(value: unknown): string {
  const text = inspect(value, { depth: 0, breakLength: Number.POSITIVE_INFINITY })
  return text.length > 80 ? `${text.slice(0, 80)}…` : text
}

function message(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error)
}

/** Nest's logger as the core's: a claim or tick error arrives as (error, jobName). */
function leaseLoggerOf(logger: LoggerService): LeaseLogger {
  return {
    debug: (text) => logger.debug?.(text),
    warn: (text) => logger.warn(text),
    error: (error, jobName) =>
      logger.error(`${jobName}: ${message(error)}`, error instanceof Error ? error.stack : undefined),
  }
}

/**
 * Checks the options (a `TypeError` naming the bad one, so the application does not start), fills
 * the defaults, and migrates the table when asked. The table, holder and record values are checked
 * again by the core on the first claim; the table name is checked here so a typo stops the start.
 */
export async function resolveConfig(options: unknown): Promise<ModuleConfig> {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`pg-cron-lease: PgCronLeaseModule options must be an object, got ${shown(options)}`)
  }
  for (const key of Object.keys(options)) {
    if (!KEYS.has(key)) {
      throw new TypeError(
        `pg-cron-lease: PgCronLeaseModule has no option ${JSON.stringify(key)} (it takes ${[...KEYS].join(', ')})`,
      )
    }
  }
  const { db, table, holder, record, logger, migrate, shutdownTimeoutMs } = options as PgCronLeaseModuleOptions
  if (typeof (db as Queryable | undefined)?.query !== 'function') {
    throw new TypeError(`pg-cron-lease: PgCronLeaseModule db must have a query(text, params) method, got ${shown(db)}`)
  }
  if (table !== undefined) quoteTable(table)
  if (migrate !== undefined && typeof migrate !== 'boolean') {
    throw new TypeError(`pg-cron-lease: PgCronLeaseModule migrate must be a boolean, got ${shown(migrate)}`)
  }
  if (shutdownTimeoutMs !== undefined && !(Number.isFinite(shutdownTimeoutMs) && shutdownTimeoutMs >= 0)) {
    throw new TypeError(
      `pg-cron-lease: PgCronLeaseModule shutdownTimeoutMs must be a number of ms, 0 or more, got ${shown(shutdownTimeoutMs)}`,
    )
  }
  if (logger != null && (typeof logger.error !== 'function' || typeof logger.warn !== 'function')) {
    throw new TypeError(`pg-cron-lease: PgCronLeaseModule logger must be a Nest LoggerService, got ${shown(logger)}`)
  }
  if (migrate === true) {
    // The same two statements as `pg-cron-lease migrate`: each is safe when every replica runs it at once.
    await db.query(createTableSql(table), [])
    await db.query(upgradeTableSql(table), [])
  }
  const nestLogger = logger ?? new Logger('PgCronLease')
  const defaults: ModuleConfig['defaults'] = {
    ...(table === undefined ? {} : { table }),
    ...(holder === undefined ? {} : { holder }),
    ...(record === undefined ? {} : { record }),
  }
  return Object.freeze({
    db,
    logger: nestLogger,
    leaseLogger: leaseLoggerOf(nestLogger),
    defaults: Object.freeze(defaults),
    shutdownTimeoutMs: shutdownTimeoutMs ?? DEFAULT_SHUTDOWN_TIMEOUT_MS,
  })
}
