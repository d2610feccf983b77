/** The module's options, their tokens, and the one step that turns them into the config. */
import { Logger, type LoggerService } from '@nestjs/common'
import { compileOptions, DEFAULTS } from '../options.js'
import { createTableSql, upgradeTableSql } from '../sql.js'
import type { LeaseLogger, LeaseOptions, Queryable } from '../types.js'
import { checkMs, checkOptions, checkQueryable, fail } from '../validate.js'

/** Options of `PgCronLeaseModule.forRoot()`; `table`, `holder`, `record`, `history`: every leased method's defaults. */
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

/** How long shutdown waits for ticks in flight by default: 10 s, a third of Kubernetes' grace. */
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = DEFAULTS.timeoutMs

export const PG_CRON_LEASE_CONFIG = Symbol('pg-cron-lease:config')

export type ModuleConfig = Awaited<ReturnType<typeof resolveConfig>>

const NAME = 'PgCronLeaseModule options'
const KEYS = ['db', 'table', 'holder', 'logger', 'record', 'history', 'migrate', 'shutdownTimeoutMs'] as const

export async function resolveConfig(options: unknown) {
  const bag = checkOptions(options, KEYS, NAME)
  const { db, logger, migrate = false, shutdownTimeoutMs = DEFAULT_SHUTDOWN_TIMEOUT_MS, ...defaults } = bag
  const pool = checkQueryable(db, `${NAME}.db`)
  // Checked as every claim checks them, so a bad one stops the start, not each fire.
  const { table } = compileOptions('withCronLease', defaults, NAME)
  if (typeof migrate !== 'boolean') fail(`${NAME}.migrate`, 'true or false', migrate)
  const waitMs = checkMs(shutdownTimeoutMs, `${NAME}.shutdownTimeoutMs`, Number.POSITIVE_INFINITY, 0)
  const nestLogger = (logger ?? new Logger('PgCronLease')) as LoggerService
  if (typeof nestLogger.error !== 'function' || typeof nestLogger.warn !== 'function')
    fail(`${NAME}.logger`, 'a Nest LoggerService, with error and warn functions', logger)
  if (migrate) for (const sql of [createTableSql(table), upgradeTableSql(table)]) await pool.query(sql, [])
  const leaseLogger: LeaseLogger = {
    debug: (text) => nestLogger.debug?.(text),
    warn: (text) => nestLogger.warn(text),
    error: (error, jobName) => {
      const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error)
      nestLogger.error(`${jobName}: ${text}`, error instanceof Error ? error.stack : undefined)
    },
  }
  const frozen = Object.freeze({ ...defaults, table })
  return Object.freeze({ db: pool, logger: nestLogger, leaseLogger, defaults: frozen, shutdownTimeoutMs: waitMs })
}
