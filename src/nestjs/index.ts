export {
  DEFAULT_HEALTH_KEY,
  type JobFilter,
  PgCronLeaseHealthIndicator,
  type PgCronLeaseHealthOptions,
} from './health.js'
export { Leased, type LeasedOptions } from './leased.js'
export { PgCronLeaseModule, type PgCronLeaseModuleAsyncOptions } from './module.js'
export { DEFAULT_SHUTDOWN_TIMEOUT_MS, type PgCronLeaseModuleOptions } from './options.js'
export { TIMEOUT_LEASE_MS } from './schedule-lease.js'
