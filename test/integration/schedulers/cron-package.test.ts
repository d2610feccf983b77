/**
 * leasedTick under the `cron` package (the scheduler @nestjs/schedule uses), on real Postgres: a
 * fire names its occurrence however the tick is handed over. `CronJob.from({ onTick: tick })` calls
 * `onTick(onComplete)` with the job as `this`; the tick reads it there, as it reads the job passed
 * as the argument, and the claim is keyed on that slot.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { CronJob } from 'cron'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { type LeaseContext, type LeasedTick, leasedTick, listLeases } from '../../../src/index.ts'

let pool: pg.Pool
let table: string
before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'cron_package')
})
after(async () => {
  await pool.end()
})

// The forms as a user types them: the first two must type-check with the tick as it is.
type Form = (tick: LeasedTick<void>) => { stop(): unknown }
const FORMS: [string, Form][] = [
  ['CronJob.from({ onTick: tick })', (tick) => CronJob.from({ cronTime: '* * * * * *', onTick: tick, start: true })],
  [
    'CronJob.from({ onTick: tick, onComplete })',
    (tick) => CronJob.from({ cronTime: '* * * * * *', onTick: tick, onComplete: () => {}, start: true }),
  ],
  ['new CronJob(pattern, tick)', (tick) => new CronJob('* * * * * *', tick, null, true)],
  [
    'onTick() { tick(this) }',
    (tick) =>
      CronJob.from({
        cronTime: '* * * * * *',
        onTick(this: CronJob) {
          void tick(this)
        },
        start: true,
      }),
  ],
]

describe("the cron package's job names the occurrence, as the argument or as `this`", () => {
  for (const [name, form] of FORMS) {
    test(`${name}: the run is for the slot it fired for, and the row keeps it`, { timeout: 15_000 }, async () => {
      const jobName = `cron-package:${name}`
      const errors: unknown[] = []
      let ran: (ctx: LeaseContext) => void = () => {}
      const firstRun = new Promise<LeaseContext>((resolve) => {
        ran = resolve
      })
      const tick = leasedTick(pool, jobName, 800, (ctx) => void ran(ctx), {
        table,
        onError: (error) => void errors.push(error),
      })
      const startedAt = Date.now()
      const job = form(tick)
      let ctx: LeaseContext
      try {
        ctx = await firstRun
      } finally {
        await job.stop()
      }
      assert.deepEqual(errors, [])
      const occurrence = ctx.occurrence?.getTime()
      assert.ok(occurrence !== undefined, 'the fire named an occurrence (not the lease alone)')
      assert.equal(occurrence % 1000, 0, 'a whole second: the slot, not the moment the timer fired')
      assert.ok(occurrence > startedAt - 1000 && occurrence <= Date.now(), 'the slot this fire was for')
      const row = (await listLeases(pool, { table })).find((lease) => lease.jobName === jobName)
      assert.equal(Date.parse(row?.lastOccurrence ?? ''), occurrence, 'the claim was keyed on that slot')
    })
  }
})
