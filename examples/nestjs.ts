/**
 * NestJS scheduled methods (@nestjs/schedule): a method that @Cron or @Interval calls on a timer
 * is one more scheduler callback. Either make its body the lease (withCronLease), or make the
 * method call a wrapper built once in the constructor (leasedTick).
 *
 *   DATABASE_URL=postgres://... npx tsx examples/nestjs.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran" for each job. It stops
 * by itself after EXAMPLE_DURATION_MS (default 30000). Nest's decorators need
 * "experimentalDecorators": true in tsconfig.json.
 */
import 'reflect-metadata'
import { Inject, Injectable, Logger, Module } from '@nestjs/common'
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
export class Jobs {
  private readonly logger = new Logger(Jobs.name)
  private readonly sweepTick: LeasedTick<void>

  constructor(@Inject(PG_POOL) private readonly pool: pg.Pool) {
    // Built once: a wiring mistake throws at startup, and a call never rejects.
    this.sweepTick = leasedTick(pool, 'example:nestjs-interval', LEASE_MS, () => this.sweep(), {
      onError: (error, jobName) => this.logger.error(`${jobName} failed`, error),
    })
  }

  // @nestjs/schedule catches a rejected method and logs it, so this may reject.
  @Cron('* * * * * *')
  async sendReport() {
    await withCronLease(this.pool, 'example:nestjs-cron', LEASE_MS, async (ctx) => {
      console.log(`ran ${ctx.jobName} #${++runs}`)
    })
  }

  @Interval(1000)
  sweepQueue() {
    return this.sweepTick()
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

setTimeout(async () => {
  await app.close() // stops every @Cron and @Interval
  await pool.end()
  console.log(`stopped after ${runs} runs`)
}, durationMs)
