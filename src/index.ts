export { fromPostgresJs, type PostgresJsSql } from './adapters/postgres-js.js'
export { type JobOptions, type PauseOptions, pauseJob, releaseLease, resumeJob } from './admin.js'
export { CHANNELS, type ClaimMessage, type RenewMessage, type TickMessage } from './channels.js'
export { LeaseLostError } from './errors.js'
export { withCronLease } from './lease.js'
export { type LeasedTick, type LeasedTickOptions, leasedTick } from './leased-tick.js'
export { type LeaseInfo, type ListLeasesOptions, listLeases } from './list-leases.js'
export { type LeaseCoordinator, type LeaseCoordinatorOptions, leaseCoordinator } from './node-cron.js'
export { LEASE, leaseForInterval, MAX_LEASE_MS } from './presets.js'
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
