export { fromPostgresJs, type PostgresJsSql } from './adapters/postgres-js.js'
export { type JobOptions, type PauseOptions, pauseJob, releaseLease, resumeJob } from './admin.js'
export {
  CHANNELS,
  type ClaimMessage,
  type DrainAbortMessage,
  type LostLeaseMessage,
  type RenewMessage,
  type RunEndMessage,
  type RunMessage,
  type RunStartMessage,
  type TickMessage,
} from './channels.js'
export { type LeaseCoordinator, type LeaseCoordinatorOptions, leaseCoordinator } from './coordinator.js'
export { type DoctorCheck, type DoctorCheckId, type DoctorOptions, runDoctor } from './doctor.js'
export { type DrainOptions, type DrainResult, drainLeases } from './drain.js'
export { ERROR_CODES, LeaseLostError } from './errors.js'
export { type CatchUpOptions, catchUp, withCronLease } from './lease.js'
export { type LeasedTick, type LeasedTickOptions, leasedTick, type TickOccurrence } from './leased-tick.js'
export {
  DEFAULT_OVERDUE_GRACE_MS,
  type LeaseInfo,
  type ListLeasesOptions,
  type ListRunsOptions,
  listLeases,
  listRuns,
  type RunInfo,
} from './listings.js'
export type { CatchUpWindow } from './options.js'
export { forInterval, type IntervalLease, LEASE, leaseForInterval, MAX_INTERVAL_MS, MAX_LEASE_MS } from './presets.js'
export {
  CRON_LEASES_TABLE_SQL,
  createTableSql,
  DEFAULT_TABLE,
  historyTableOf,
  quoteTable,
  upgradeTableSql,
} from './sql.js'
export type {
  HistoryOptions,
  KeepAlive,
  LeaseContext,
  LeaseLogger,
  LeaseOptions,
  LeaseOutcome,
  Queryable,
  QueryResultLike,
} from './types.js'
