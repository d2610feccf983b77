/**
 * `PgCronLeaseModule`: the module an application imports once, with its database and the defaults
 * of its leased methods. Global, so the health indicator can be injected anywhere; the runner sits
 * in a module of its own that is not, so that its start-up hooks run after @nestjs/schedule's (see
 * runner.ts).
 */
import { type DynamicModule, type FactoryProvider, Module, type ModuleMetadata, type Provider } from '@nestjs/common'
import { DiscoveryModule } from '@nestjs/core'
import { PgCronLeaseHealthIndicator } from './health.js'
import { PG_CRON_LEASE_CONFIG, PG_CRON_LEASE_OPTIONS, type PgCronLeaseModuleOptions, resolveConfig } from './options.js'
import { PgCronLeaseRunner } from './runner.js'

/**
 * Options of `PgCronLeaseModule.forRootAsync()`: a factory for the options, what it is injected
 * with, and the modules those come from.
 *
 * @example
 * const opts: PgCronLeaseModuleAsyncOptions = {
 *   inject: [PG_POOL],
 *   useFactory: (pool: pg.Pool) => ({ db: pool, migrate: true }),
 * }
 */
export interface PgCronLeaseModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  useFactory: (...args: any[]) => PgCronLeaseModuleOptions | Promise<PgCronLeaseModuleOptions>
  inject?: FactoryProvider['inject']
}

class PgCronLeaseRunnerModule {}
Module({ imports: [DiscoveryModule], providers: [PgCronLeaseRunner] })(PgCronLeaseRunnerModule)

function dynamicModule(options: Provider, imports: ModuleMetadata['imports'] = []): DynamicModule {
  return {
    module: PgCronLeaseModule,
    global: true,
    imports: [...imports, PgCronLeaseRunnerModule],
    providers: [
      options,
      { provide: PG_CRON_LEASE_CONFIG, useFactory: resolveConfig, inject: [PG_CRON_LEASE_OPTIONS] },
      PgCronLeaseHealthIndicator,
    ],
    exports: [PG_CRON_LEASE_CONFIG, PgCronLeaseHealthIndicator],
  }
}

/**
 * Runs the application's `@Leased()` methods as singletons across its replicas, on `db`. Import it
 * once, beside `ScheduleModule.forRoot()`. The options are checked when the application starts
 * (a `TypeError` stops it), and with `migrate: true` the table is created or upgraded then.
 * `app.close()` waits for the ticks in flight, up to `shutdownTimeoutMs`; end the pool after it.
 *
 * @example
 * \@Module({
 *   imports: [ScheduleModule.forRoot(), PgCronLeaseModule.forRoot({ db: pool, migrate: true })],
 *   providers: [Reports],
 * })
 * class AppModule {}
 */
// biome-ignore lint/complexity/noStaticOnlyClass: Nest knows a module by its class, with forRoot() on it
export class PgCronLeaseModule {
  /**
   * The module with its options given as a value.
   *
   * @example
   * PgCronLeaseModule.forRoot({ db: pool, table: 'jobs.cron_leases', holder: process.env.HOSTNAME })
   */
  static forRoot(options: PgCronLeaseModuleOptions): DynamicModule {
    return dynamicModule({ provide: PG_CRON_LEASE_OPTIONS, useValue: options })
  }

  /**
   * The module with its options made by a factory, from what it injects (a `ConfigService`, a pool
   * provider).
   *
   * @example
   * PgCronLeaseModule.forRootAsync({
   *   imports: [ConfigModule],
   *   inject: [ConfigService],
   *   useFactory: (config: ConfigService) => ({ db: new pg.Pool({ connectionString: config.get('DATABASE_URL') }) }),
   * })
   */
  static forRootAsync(options: PgCronLeaseModuleAsyncOptions): DynamicModule {
    const { useFactory, inject = [], imports } = options
    return dynamicModule({ provide: PG_CRON_LEASE_OPTIONS, useFactory, inject }, imports)
  }
}
