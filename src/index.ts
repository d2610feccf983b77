export { fromPostgresJs, type PostgresJsSql } from './adapters/postgres-js.js'
export { type JobOptions, type PauseOptions, pauseJob, releaseLease, resumeJob } from './admin.js'
export { CHANNELS, type ClaimMessage, type RenewMessage, type TickMessage } from './channels.js'
export { type LeaseInfo, type ListLeasesOptions, listLeases } from './inspect.js'
export { withCronLease } from './lease.js'
export { LEASE, leaseForInterval, MAX_LEASE_MS } from './presets.js'
export {
  type LeaseCoordinator,
  type LeaseCoordinatorOptions,
  type LeasedTick,
  type LeasedTickOptions,
  leaseCoordinator,
  leasedTick,
} from './schedulers.js'
export { CRON_LEASES_TABLE_SQL, createTableSql, DEFAULT_TABLE, quoteTable, upgradeTableSql } from './sql.js'
export type {
  KeepAlive,
  LeaseContext,
  LeaseLogger,
  LeaseOptions,
  LeaseOutcome,
  Queryable,
  QueryResultLike,
} from './types.js'
