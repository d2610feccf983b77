/** `pg-cron-lease check`'s verdict as a Terminus indicator; Terminus, an optional peer, loads at the first check. */
import { Inject, Injectable } from '@nestjs/common'
import { ModuleRef } from '@nestjs/core'
import type { HealthIndicatorResult, HealthIndicatorService } from '@nestjs/terminus'
import { messageOf } from '../format-value.js'
import type { ListLeasesOptions } from '../listings.js'
import { checkJobs, type JobFilter } from '../verdict.js'
import { type ModuleConfig, PG_CRON_LEASE_CONFIG } from './options.js'

/** Options of {@link PgCronLeaseHealthIndicator.isHealthy}: the job filter and overdue rules. */
export interface PgCronLeaseHealthOptions extends Pick<ListLeasesOptions, 'overdueGraceMs' | 'overdueFactor'> {
  /** Default: every job in the table. */
  jobs?: JobFilter
}

/** The key a check reports under when none is given. */
export const DEFAULT_HEALTH_KEY = 'pg-cron-lease'

/**
 * `up` or `down` as `pg-cron-lease check` decides, or `down` when the database cannot be read (docs/nestjs.md#health).
 * @example check() { return this.health.check([() => this.leases.isHealthy('jobs')]) }
 */
export class PgCronLeaseHealthIndicator {
  private service: Promise<HealthIndicatorService> | undefined

  constructor(
    private readonly config: ModuleConfig,
    private readonly moduleRef: ModuleRef,
  ) {}

  /** Checks the jobs, reporting under `key`; pass the filter itself or `{ jobs, overdueGraceMs, overdueFactor }`. */
  async isHealthy(
    key: string = DEFAULT_HEALTH_KEY,
    options: JobFilter | PgCronLeaseHealthOptions = {},
  ): Promise<HealthIndicatorResult> {
    const filter = Array.isArray(options) || typeof options === 'function' ? { jobs: options } : options
    const { jobs, overdueGraceMs, overdueFactor } = filter as PgCronLeaseHealthOptions
    // The application's own service when it imports TerminusModule, else one of ours.
    this.service ??= import('@nestjs/terminus').then((terminus) => {
      try {
        return this.moduleRef.get(terminus.HealthIndicatorService, { strict: false })
      } catch {
        return new terminus.HealthIndicatorService()
      }
    })
    const session = (await this.service).check(key)
    const { table } = this.config.defaults
    const verdict = await checkJobs(this.config.db, { table, jobs, overdueGraceMs, overdueFactor }).catch(messageOf)
    if (typeof verdict === 'string') return session.down({ message: `cannot read ${table}: ${verdict}` })
    const unhealthy = verdict.jobs.filter((job) => !job.healthy)
    if (unhealthy.length === 0) return session.up({ checked: verdict.jobs.length })
    return session.down({
      jobs: unhealthy.map((job) => job.jobName),
      reasons: Object.fromEntries(unhealthy.map((job) => [job.jobName, job.reason])),
    })
  }
}

Injectable()(PgCronLeaseHealthIndicator)
Inject(PG_CRON_LEASE_CONFIG)(PgCronLeaseHealthIndicator, undefined, 0)
Inject(ModuleRef)(PgCronLeaseHealthIndicator, undefined, 1)
