/**
 * One NestJS replica as its own process, for the test whose event loop is blocked: a per-second
 * leased @Cron that records each run with its occurrence. Run it with
 * `node --import tsx test/helpers/nest-replica.ts`.
 *
 * Environment: DATABASE_URL, LEASE_TABLE, RUNS_TABLE, HOLDER. Prints
 * `{"ready":true,"nestjs":<major>}` once started (the NestJS major it loaded), and one
 * `{"claim":…}` line per claim it sends (from the claim channel). A line `block <ms>` on stdin
 * blocks its event loop that long, then until the clock is 850 ms into a second (a lease of the
 * last slot has run out then, while the slot is taken), printing `{"blocked":…}`. It stops,
 * app closed and pool ended, when its stdin closes.
 */
import 'reflect-metadata'
import diagnostics from 'node:diagnostics_channel'
import { createInterface } from 'node:readline'
import { Injectable, Module } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { Cron, ScheduleModule } from '@nestjs/schedule'
import pg from 'pg'
import { CHANNELS, type ClaimMessage, type LeaseContext } from '../../src/index.ts'
import { Leased, PgCronLeaseModule } from '../../src/nestjs/index.ts'
import { NESTJS_MAJOR } from './nestjs-major.ts'

const env = (name: string) => {
  const value = process.env[name]
  if (!value) throw new Error(`nest-replica needs ${name}`)
  return value
}
const runs = env('RUNS_TABLE')
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 2 })

diagnostics.subscribe(CHANNELS.claim, (message) => {
  const { jobName, won } = message as ClaimMessage
  console.log(JSON.stringify({ claim: { jobName, won, at: Date.now() } }))
})

@Injectable()
class Jobs {
  @Cron('* * * * * *', { name: 'nest:blocked' })
  @Leased()
  async tick(ctx: LeaseContext) {
    await pool.query(`INSERT INTO "${runs}" (job, holder, occurrence) VALUES ($1, $2, $3)`, [
      ctx.jobName,
      ctx.holder,
      ctx.occurrence,
    ])
  }
}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    PgCronLeaseModule.forRoot({ db: pool, table: env('LEASE_TABLE'), holder: env('HOLDER') }),
  ],
  providers: [Jobs],
})
class AppModule {}

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] })
console.log(JSON.stringify({ ready: true, nestjs: NESTJS_MAJOR }))

const input = createInterface({ input: process.stdin })
input.on('line', (line) => {
  const ms = Number(/^block (\d+)$/.exec(line)?.[1])
  if (!Number.isFinite(ms)) return
  const from = Date.now()
  while (Date.now() - from < ms || Date.now() % 1000 < 850) {
    // Busy: no timer, no I/O, nothing of this process runs.
  }
  console.log(JSON.stringify({ blocked: { from, to: Date.now() } }))
})
input.on('close', async () => {
  await app.close()
  await pool.end()
  console.log(JSON.stringify({ done: true }))
})
