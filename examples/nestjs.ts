/**
 * NestJS scheduled methods (@nestjs/schedule): a method that @Cron or @Interval calls on a timer
 * is one more scheduler callback. Either make its body the lease (withCronLease), or make the
 * method call a wrapper built once in the constructor (leasedTick).
 *
 * @nestjs/schedule passes a method nothing, so the @Cron method names its occurrence itself, from
 * its job in the SchedulerRegistry: the scheduled slot of the run in progress, and the next one.
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
import { Cron, Interval, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule'
import pg from 'pg'
import {
  CRON_LEASES_TABLE_SQL,
  forInterval,
  type LeaseContext,
  type LeasedTick,
  leasedTick,
  leaseForInterval,
  withCronLease,
} from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const PG_POOL = Symbol('PG_POOL') // the provider token of the app's pg.Pool
const REPORT_JOB = 'example:nestjs-cron' // the @Cron job's name in the registry, and its lease's
let runs = 0

/** A job of the `cron` package, which runs every @Cron method. */
type CronJob = ReturnType<SchedulerRegistry['getCronJob']>

/**
 * The scheduled slot of the run in progress: the latest time the job's schedule names that is not
 * after the moment its timer fired. The `cron` package keeps only that moment (`lastDate()`, a few
 * ms past the slot, more on a busy event loop), so the slot is derived from the schedule: a
 * per-second job's is its whole second, an hourly job's the hour. `getNextDateFrom(t)` gives the
 * first slot after t's whole second, in t's zone (the job's zone, taken from `nextDate()`), so look
 * back until there is one, then step forward to the last one not after the fire. Read it before
 * the method awaits anything: `lastDate()` moves on with the next fire.
 */
function scheduledSlot(job: CronJob): Date | null {
  const fired = job.lastDate()?.getTime()
  if (fired === undefined) return null
  const inZone = job.nextDate()
  const at = (ms: number) => inZone.plus({ milliseconds: ms - inZone.toMillis() })
  let slot = job.cronTime.getNextDateFrom(at(fired - 1000))
  // Doubling back from a second: a yearly schedule is found within 2^36 ms (about two years).
  for (let back = 2000; slot.toMillis() > fired; back *= 2) {
    if (back > 2 ** 36) return null
    slot = job.cronTime.getNextDateFrom(at(fired - back))
  }
  for (let next = job.cronTime.getNextDateFrom(slot); next.toMillis() <= fired; ) {
    slot = next
    next = job.cronTime.getNextDateFrom(slot)
  }
  return slot.toJSDate()
}

@Injectable()
export class Jobs implements OnApplicationShutdown {
  private readonly logger = new Logger(Jobs.name)
  private readonly sweepTick: LeasedTick<void>
  // The ticks still running: each claims and records its outcome through the pool.
  private readonly inFlight = new Set<Promise<unknown>>()

  constructor(
    @Inject(PG_POOL) private readonly pool: pg.Pool,
    @Inject(SchedulerRegistry) private readonly registry: SchedulerRegistry,
  ) {
    // Built once: a wiring mistake throws at startup, and a call never rejects. @Interval names no
    // occurrence: forInterval declares the interval, so the job's next due time is one interval on.
    this.sweepTick = leasedTick(
      pool,
      'example:nestjs-interval',
      forInterval(1000),
      (ctx) => this.sweep(ctx),
      {
        onError: (error, jobName) => this.logger.error(`${jobName} failed`, error),
      },
    )
  }

  // @nestjs/schedule catches a rejected method and logs it, so this may reject.
  @Cron('* * * * * *', { name: REPORT_JOB })
  sendReport() {
    return this.track(
      (async () => {
        // A fire already late when the job is made runs inside its constructor, before
        // @nestjs/schedule registers the job: one turn of the microtask queue later, it is there.
        await null
        const job = this.registry.getCronJob(REPORT_JOB)
        return withCronLease(
          this.pool,
          REPORT_JOB,
          leaseForInterval(1000),
          (ctx) => this.report(ctx),
          {
            occurrence: scheduledSlot(job),
            nextOccurrence: job.nextDate().toJSDate(),
          },
        )
      })(),
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

  private async report(ctx: LeaseContext) {
    console.log(
      `ran ${ctx.jobName} #${++runs} for ${ctx.occurrence?.toISOString()} (missed ${ctx.missed})`,
    )
  }

  private async sweep(ctx: LeaseContext) {
    console.log(`ran ${ctx.jobName} #${++runs} (missed ${ctx.missed})`)
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
