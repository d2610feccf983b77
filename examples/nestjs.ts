/**
 * NestJS (@nestjs/schedule) on the pg-cron-lease/nestjs subpath: import the module, put @Leased()
 * beside @Cron or @Interval, and each fire runs on one replica only (docs/nestjs.md):
 *   DATABASE_URL=postgres://... npx tsx --tsconfig examples/tsconfig.json examples/nestjs.ts
 *
 * Start it in two terminals: each second exactly one of them prints "ran" for each job. It stops
 * by itself after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM.
 */
import 'reflect-metadata'
import { Injectable, Module } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule'
import pg from 'pg'
import type { LeaseContext } from 'pg-cron-lease'
import { Leased, PgCronLeaseModule } from 'pg-cron-lease/nestjs'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
let runs = 0
const ran = (ctx: LeaseContext, slot = '') =>
  console.log(`ran ${ctx.jobName} #${++runs}${slot} (missed ${ctx.missed})`)

@Injectable()
class Jobs {
  @Cron('* * * * * *', { name: 'example:nestjs-cron' }) // the job name, and the lease's
  @Leased() // the lease: 80% of the gap, 800 ms; the occurrence: this fire's slot
  async report(ctx: LeaseContext) {
    ran(ctx, ` for ${ctx.occurrence?.toISOString()}`)
  }

  @Interval('example:nestjs-interval', 1000)
  @Leased() // forInterval(1000): the lease, and the interval declared
  async sweep(ctx: LeaseContext) {
    ran(ctx)
  }
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })

@Module({
  imports: [ScheduleModule.forRoot(), PgCronLeaseModule.forRoot({ db: pool, migrate: true })],
  providers: [Jobs],
})
class AppModule {}

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] })

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    await app.close() // stops every timer, then waits for the ticks in flight (shutdownTimeoutMs)
    await pool.end()
    console.log(`stopped after ${runs} runs`)
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
