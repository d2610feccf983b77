/** The module an application imports once; global for the health indicator, its runner's module not (runner.ts). */
import { type DynamicModule, type FactoryProvider, Module, type ModuleMetadata, type Provider } from '@nestjs/common'
import { DiscoveryModule } from '@nestjs/core'
import { PgCronLeaseHealthIndicator } from './health.js'
import { PG_CRON_LEASE_CONFIG, PG_CRON_LEASE_OPTIONS, type PgCronLeaseModuleOptions, resolveConfig } from './options.js'
import { PgCronLeaseRunner } from './runner.js'

/**
 * Options of `PgCronLeaseModule.forRootAsync()`.
 *
 * @example
 * const opts: PgCronLeaseModuleAsyncOptions = { inject: [PG_POOL], useFactory: (pool: pg.Pool) => ({ db: pool }) }
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
 * Runs the application's `@Leased()` methods as singletons across replicas. Import it once, beside
 * `ScheduleModule.forRoot()`; `app.close()` waits for ticks in flight, so end the pool after it.
 *
 * @example
 * \@Module({ imports: [ScheduleModule.forRoot(), PgCronLeaseModule.forRoot({ db: pool, migrate: true })] })
 * class AppModule {}
 */
// biome-ignore lint/complexity/noStaticOnlyClass: Nest knows a module by its class, with forRoot() on it
export class PgCronLeaseModule {
  /**
   * The module with its options given as a value.
   *
   * @example
   * PgCronLeaseModule.forRoot({ db: pool, table: 'jobs.cron_leases' })
   */
  static forRoot(options: PgCronLeaseModuleOptions): DynamicModule {
    return dynamicModule({ provide: PG_CRON_LEASE_OPTIONS, useValue: options })
  }

  /**
   * The module with its options made by a factory.
   *
   * @example
   * PgCronLeaseModule.forRootAsync({ inject: [ConfigService], useFactory: (c: ConfigService) => ({ db: poolFrom(c) }) })
   */
  static forRootAsync(options: PgCronLeaseModuleAsyncOptions): DynamicModule {
    const { useFactory, inject = [], imports } = options
    return dynamicModule({ provide: PG_CRON_LEASE_OPTIONS, useFactory, inject }, imports)
  }
}
