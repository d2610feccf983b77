/** The module's options, their tokens, and the one step that turns them into the config. */
import { inspect } from 'node:util'
import { Logger, type LoggerService } from '@nestjs/common'
import { createTableSql, quoteTable, upgradeTableSql } from '../sql.js'
import type { LeaseLogger, LeaseOptions, Queryable } from '../types.js'

/**
 * Options of `PgCronLeaseModule.forRoot()`; `table`, `holder` and `record` are the core's, the
 * defaults of every leased method.
 *
 * @example
 * const opts: PgCronLeaseModuleOptions = { db: pool, migrate: true, holder: process.env.HOSTNAME }
 */
export interface PgCronLeaseModuleOptions extends Pick<LeaseOptions, 'table' | 'holder' | 'record'> {
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

/** The token the module's resolved config is provided under. */
export const PG_CRON_LEASE_CONFIG = Symbol('pg-cron-lease:config')

/** The token the user's options are provided under (forRoot's value, forRootAsync's factory). */
export const PG_CRON_LEASE_OPTIONS = Symbol('pg-cron-lease:options')

/** The options checked, defaults filled: what the runner and the health indicator read. */
export interface ModuleConfig {
  readonly db: Queryable
  readonly logger: LoggerService
  readonly leaseLogger: LeaseLogger
  readonly defaults: Readonly<Pick<LeaseOptions, 'table' | 'holder' | 'record'>>
  readonly shutdownTimeoutMs: number
}

const KEYS = new Set(['db', 'table', 'holder', 'logger', 'record', 'migrate', 'shutdownTimeoutMs'])

/** A value as an error message shows it, cut at 80 characters. */
export function shown(value: unknown, depth = 0): string {
  const text = inspect(value, { depth, breakLength: Number.POSITIVE_INFINITY })
  return text.length > 80 ? `${text.slice(0, 80)}…` : text
}

function message(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error)
}

function leaseLoggerOf(logger: LoggerService): LeaseLogger {
  return {
    debug: (text) => logger.debug?.(text),
    warn: (text) => logger.warn(text),
    error: (error, jobName) =>
      logger.error(`${jobName}: ${message(error)}`, error instanceof Error ? error.stack : undefined),
  }
}

/** Checks the options (a `TypeError` stops the start), fills the defaults, migrates when asked. */
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
