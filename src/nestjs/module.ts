/** The module an application imports once; global for the health indicator, its runner's module not (runner.ts). */
import { type DynamicModule, type FactoryProvider, Module, type ModuleMetadata } from '@nestjs/common'
import { DiscoveryModule } from '@nestjs/core'
import { PgCronLeaseHealthIndicator } from './health.js'
import { PG_CRON_LEASE_CONFIG, type PgCronLeaseModuleOptions, resolveConfig } from './options.js'
import { PgCronLeaseRunner } from './runner.js'

/** Options of `PgCronLeaseModule.forRootAsync()`: a factory of the module's options, and what it needs injected. */
export interface PgCronLeaseModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  useFactory: (...args: any[]) => PgCronLeaseModuleOptions | Promise<PgCronLeaseModuleOptions>
  inject?: FactoryProvider['inject']
}

class PgCronLeaseRunnerModule {}
Module({ imports: [DiscoveryModule], providers: [PgCronLeaseRunner] })(PgCronLeaseRunnerModule)

/**
 * Runs the application's `@Leased()` methods as singletons across replicas. Import it once, beside
 * `ScheduleModule.forRoot()`; `app.close()` waits for ticks in flight, so end the pool after it.
 * @example
 * \@Module({ imports: [ScheduleModule.forRoot(), PgCronLeaseModule.forRoot({ db: pool, migrate: true })] })
 * class AppModule {}
 */
// biome-ignore lint/complexity/noStaticOnlyClass: Nest knows a module by its class, with forRoot() on it
export class PgCronLeaseModule {
  /** The module with its options given as a value, as in the class's example. */
  static forRoot(options: PgCronLeaseModuleOptions): DynamicModule {
    return PgCronLeaseModule.forRootAsync({ useFactory: () => options })
  }

  /**
   * The module with its options made by a factory, which may be async and take injected providers.
   * @example PgCronLeaseModule.forRootAsync({ inject: [PG_POOL], useFactory: (pool: pg.Pool) => ({ db: pool }) })
   */
  static forRootAsync({ useFactory, inject = [], imports = [] }: PgCronLeaseModuleAsyncOptions): DynamicModule {
    const useConfig = async (...args: unknown[]) => resolveConfig(await useFactory(...args))
    return {
      module: PgCronLeaseModule,
      global: true,
      imports: [...imports, PgCronLeaseRunnerModule],
      providers: [{ provide: PG_CRON_LEASE_CONFIG, useFactory: useConfig, inject }, PgCronLeaseHealthIndicator],
      exports: [PG_CRON_LEASE_CONFIG, PgCronLeaseHealthIndicator],
    }
  }
}
