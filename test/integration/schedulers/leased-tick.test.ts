/**
 * leasedTick with real schedulers (croner, setInterval) on real Postgres: every occurrence runs
 * exactly once across replicas, errors reach onError without ever becoming an unhandled
 * rejection, and without an onError they are one console line each, at most one a minute.
 * Occurrences are counted by the database clock (see helpers/occurrences.ts).
 */
import assert from 'node:assert/strict'
import { after, before, describe, type TestContext, test } from 'node:test'
import { Cron } from 'croner'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { type LeasedTick, leasedTick, withCronLease } from '../../../src/index.ts'
import { assertExactlyOnce, readRuns, recordRun, runsTable } from '../../helpers/occurrences.ts'

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
  pools = await Promise.all(Array.from({ length: REPLICAS }, () => testPool({ max: 2 }, 2)))
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
      // Each replica reads the table's shape before the first occurrence, as one that has been
      // running has: that read inside the first claim made it late enough, on a loaded machine, for
      // its lease to outlast the next fire, which was then (rightly) missed.
      await Promise.all(pools.map((p) => withCronLease(p, 'warm-up', 1, () => {}, { table: leases, record: false })))
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
          claimErrors.every((e) => {
            const error = e.error as { code?: string; cause?: { code?: string } }
            return (error.code ?? error.cause?.code) === '42P01'
          }),
          'undefined_table',
        )
        assert.deepEqual(unhandled, [])
      } finally {
        process.off('unhandledRejection', onUnhandled)
      }
    })
  }
})

describe('without onError, errors are one console line each, at most one a minute a job', () => {
  /** Three calls of a tick that throws a two-line error, each after its 20 ms lease has run out. */
  async function threeFailures(table: string, jobName: string, opts: Parameters<typeof leasedTick>[4] = {}) {
    const thrown: Error[] = []
    const tick = leasedTick(
      pool,
      jobName,
      20,
      () => {
        const error = new Error(`run ${thrown.length + 1} failed\nwith details on the second line`)
        thrown.push(error)
        throw error
      },
      { table, ...opts },
    )
    for (let i = 0; i < 3; i++) {
      assert.equal(await tick(), undefined)
      await sleep(40)
    }
    assert.equal(thrown.length, 3, 'each call won its claim and ran the tick')
    return thrown
  }

  const muteConsole = (t: TestContext) => t.mock.method(console, 'error', () => {})

  test('the first error of a job is one line, with no stack; the two after it within the minute print nothing', async (t) => {
    const table = await freshTable(pool, 'tick_lines')
    const printed = muteConsole(t)
    await threeFailures(table, 'lines:sync')
    assert.deepEqual(
      printed.mock.calls.map((call) => call.arguments),
      [["pg-cron-lease: 'lines:sync' tick failed: Error: run 1 failed"]],
    )
  })

  test('each job has its own minute: a second job failing meanwhile prints its own line', async (t) => {
    const table = await freshTable(pool, 'tick_jobs')
    const printed = muteConsole(t)
    await Promise.all([threeFailures(table, 'jobs:a'), threeFailures(table, 'jobs:b')])
    assert.deepEqual(printed.mock.calls.map((call) => call.arguments).sort(), [
      ["pg-cron-lease: 'jobs:a' tick failed: Error: run 1 failed"],
      ["pg-cron-lease: 'jobs:b' tick failed: Error: run 1 failed"],
    ])
  })

  test('a claim error is one line too', async (t) => {
    const printed = muteConsole(t)
    const tick = leasedTick(pool, 'lines:no-table', 20, () => assert.fail('must not run'), { table: 'no_such_leases' })
    assert.equal(await tick(), undefined)
    assert.equal(printed.mock.callCount(), 1)
    const [line, ...rest] = printed.mock.calls[0]!.arguments
    assert.deepEqual(rest, [])
    assert.match(String(line), /^pg-cron-lease: 'lines:no-table' tick failed: \w*Error: [^\n]*no_such_leases[^\n]*$/)
  })

  test('a logger with error gets every error whole, as error(err, jobName), and nothing reaches the console', async (t) => {
    const table = await freshTable(pool, 'tick_logger')
    const printed = muteConsole(t)
    const logged: unknown[][] = []
    const thrown = await threeFailures(table, 'lines:logged', {
      logger: { error: (...args: unknown[]) => void logged.push(args) },
    })
    assert.deepEqual(
      logged,
      thrown.map((error) => [error, 'lines:logged']),
    )
    assert.equal(printed.mock.callCount(), 0)
  })

  test('an onError of its own gets every error whole, and nothing reaches the console', async (t) => {
    const table = await freshTable(pool, 'tick_own')
    const printed = muteConsole(t)
    const seen: unknown[][] = []
    const thrown = await threeFailures(table, 'lines:own', { onError: (...args: unknown[]) => void seen.push(args) })
    assert.deepEqual(
      seen,
      thrown.map((error) => [error, 'lines:own']),
    )
    assert.equal(printed.mock.callCount(), 0)
  })
})
