/**
 * NestJS scheduled methods (@nestjs/schedule): a method that @Cron or @Interval calls on a timer
 * is one more scheduler callback. Either make its body the lease (withCronLease), or make the
 * method call a wrapper built once in the constructor (leasedTick).
 *
 *   DATABASE_URL=postgres://... npx tsx --tsconfig examples/tsconfig.json examples/nestjs.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran" for each job. It stops
 * by itself after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM. Nest's decorators
 * need "experimentalDecorators": true, which examples/tsconfig.json sets.
 */
import 'reflect-metadata'
import { Inject, Injectable, Logger, Module, type OnApplicationShutdown } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule'
import pg from 'pg'
import {
  CRON_LEASES_TABLE_SQL,
  type LeasedTick,
  leasedTick,
  leaseForInterval,
  withCronLease,
} from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const PG_POOL = Symbol('PG_POOL') // the provider token of the app's pg.Pool
const LEASE_MS = leaseForInterval(1000) // both methods below run every second
let runs = 0

@Injectable()
export class Jobs implements OnApplicationShutdown {
  private readonly logger = new Logger(Jobs.name)
  private readonly sweepTick: LeasedTick<void>
  // The ticks still running: each claims and records its outcome through the pool.
  private readonly inFlight = new Set<Promise<unknown>>()

  constructor(@Inject(PG_POOL) private readonly pool: pg.Pool) {
    // Built once: a wiring mistake throws at startup, and a call never rejects.
    this.sweepTick = leasedTick(pool, 'example:nestjs-interval', LEASE_MS, () => this.sweep(), {
      onError: (error, jobName) => this.logger.error(`${jobName} failed`, error),
    })
  }

  // @nestjs/schedule catches a rejected method and logs it, so this may reject.
  @Cron('* * * * * *')
  sendReport() {
    return this.track(
      withCronLease(this.pool, 'example:nestjs-cron', LEASE_MS, async (ctx) => {
        console.log(`ran ${ctx.jobName} #${++runs}`)
      }),
    )
  }

  @Interval(1000)
  sweepQueue() {
    return this.track(this.sweepTick())
  }

  // @nestjs/schedule stops every @Cron and @Interval before this hook, but not the ticks already
  // running: app.close() resolves only once they have settled, so the pool can be ended after it.
  async onApplicationShutdown() {
    while (this.inFlight.size > 0) await Promise.allSettled(this.inFlight)
  }

  private track<T>(tick: Promise<T>): Promise<T> {
    this.inFlight.add(tick)
    const forget = () => this.inFlight.delete(tick)
    tick.then(forget, forget)
    return tick
  }

  private async sweep() {
    console.log(`ran example:nestjs-interval #${++runs}`)
  }
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)

@Module({
  imports: [ScheduleModule.forRoot()],
  providers: [Jobs, { provide: PG_POOL, useValue: pool }],
})
class AppModule {}

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] })

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    await app.close() // stops every @Cron and @Interval, then waits for the ticks still running
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
