/**
 * leasedTick with real schedulers (croner, setInterval) on real Postgres: every occurrence runs
 * exactly once across replicas, and errors reach onError without ever becoming an unhandled
 * rejection. Occurrences are counted by the database clock (see helpers/occurrences.ts).
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { Cron } from 'croner'
import type pg from 'pg'
import { freshTable, testPool } from '../../dev/postgres.ts'
import { type LeasedTick, leasedTick } from '../../src/index.ts'
import { assertExactlyOnce, readRuns, recordRun, runsTable } from '../helpers/occurrences.ts'

const INTERVAL_MS = 1000
const LEASE_MS = 800
const REPLICAS = 3
const MIN_OCCURRENCES = 5
const WINDOW_MS = 6200

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

let pool: pg.Pool
let pools: pg.Pool[]
before(async () => {
  pool = await testPool()
  pools = await Promise.all(Array.from({ length: REPLICAS }, () => testPool({ max: 2 })))
})
after(async () => {
  await Promise.all([pool, ...pools].map((p) => p.end()))
})

/** Hands the wrapper straight to the scheduler, as a user would; returns its stop function. */
type Scheduler = (tick: LeasedTick<unknown>) => () => void

const croner: Scheduler = (tick) => {
  const job = new Cron('* * * * * *', tick)
  return () => job.stop()
}
const interval: Scheduler = (tick) => {
  const timer = setInterval(tick, INTERVAL_MS)
  return () => clearInterval(timer)
}

/** Starts one wrapped tick per replica on `scheduler`, waits `windowMs`, stops them, lets the last calls finish. */
async function runReplicas(
  scheduler: Scheduler,
  windowMs: number,
  makeTicks: (replicaPool: pg.Pool, holder: string) => LeasedTick<unknown>[],
) {
  const stops = pools.flatMap((replicaPool, i) => makeTicks(replicaPool, `replica-${i}`).map(scheduler))
  try {
    await sleep(windowMs)
  } finally {
    for (const stop of stops) stop()
    // A tick here is one short insert; half a second lets the last calls settle.
    await sleep(500)
  }
}

describe('leasedTick: every occurrence runs exactly once across replicas', () => {
  for (const [name, scheduler] of [
    ['croner', croner],
    ['setInterval', interval],
  ] as const) {
    test(`three replicas on ${name}, every second for six seconds`, async () => {
      const leases = await freshTable(pool, `tick_${name}`)
      const runs = await runsTable(pool)
      const errors: unknown[] = []
      await runReplicas(scheduler, WINDOW_MS, (replicaPool, holder) => [
        leasedTick(replicaPool, `sync:${name}`, LEASE_MS, () => recordRun(replicaPool, runs, holder), {
          table: leases,
          holder,
          onError: (error) => void errors.push(error),
        }),
      ])
      const report = await readRuns(pool, runs, INTERVAL_MS)
      console.log(`# leasedTick on ${name}: ${JSON.stringify(report)}`)
      assert.deepEqual(errors, [])
      assertExactlyOnce(report, INTERVAL_MS, MIN_OCCURRENCES)
    })
  }
})

describe('leasedTick: errors reach onError and never become unhandled rejections', () => {
  for (const [name, scheduler] of [
    ['croner', croner],
    ['setInterval', interval],
  ] as const) {
    test(`on ${name}, a throwing tick goes to onError once per occurrence and keeps its lease; a claim error goes to onError`, async () => {
      const unhandled: unknown[] = []
      const onUnhandled = (reason: unknown) => void unhandled.push(reason)
      process.on('unhandledRejection', onUnhandled)
      try {
        const leases = await freshTable(pool, `fail_${name}`)
        const runs = await runsTable(pool)
        const errors: { job: string; error: unknown }[] = []
        const onError = (error: unknown, job: string) => void errors.push({ job, error })
        await runReplicas(scheduler, 3200, (replicaPool, holder) => {
          const failing = leasedTick(
            replicaPool,
            `fail:${name}`,
            LEASE_MS,
            async () => {
              await recordRun(replicaPool, runs, holder)
              throw new Error(`tick failed on ${holder}`)
            },
            { table: leases, holder, onError },
          )
          // A claim that errors: the table does not exist.
          const broken = leasedTick(replicaPool, `broken:${name}`, LEASE_MS, () => assert.fail('must not run'), {
            table: `${leases}_missing`,
            holder,
            onError,
          })
          return [failing, broken]
        })
        // Rejections are reported after the microtask queue drains; give them a turn to surface.
        await sleep(50)

        const report = await readRuns(pool, runs, INTERVAL_MS)
        console.log(`# failing ticks on ${name}: ${JSON.stringify(report)}`)
        // The failed tick kept its lease: the other replicas, firing at the same moment, did not rerun it.
        assertExactlyOnce(report, INTERVAL_MS, 3)
        const tickErrors = errors.filter((e) => e.job === `fail:${name}`)
        const claimErrors = errors.filter((e) => e.job === `broken:${name}`)
        assert.equal(tickErrors.length, report.runs, 'one onError per tick that ran and threw')
        assert.ok(tickErrors.every((e) => /^tick failed on replica-\d$/.test((e.error as Error).message)))
        assert.ok(claimErrors.length >= REPLICAS, `claim errors: ${claimErrors.length}`)
        assert.ok(
          claimErrors.every((e) => (e.error as { code?: string }).code === '42P01'),
          'undefined_table',
        )
        assert.deepEqual(unhandled, [])
      } finally {
        process.off('unhandledRejection', onUnhandled)
      }
    })
  }
})
