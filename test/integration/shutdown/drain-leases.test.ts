/**
 * drainLeases, the graceful shutdown of every entry point, on real Postgres. Draining is for the
 * whole process and for good, so this file drains once, in `before`, with runs of each entry point
 * in flight, and each test reads one property of what happened; a SIGTERM handler is tried in a
 * process of its own.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { after, before, describe, test } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import type pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import {
  catchUp,
  type DrainResult,
  drainLeases,
  type LeaseInfo,
  leaseCoordinator,
  leasedTick,
  listLeases,
  listRuns,
  type Queryable,
  withCronLease,
} from '../../../src/index.ts'
import { finished } from '../../helpers/child.ts'

const TIMEOUT_MS = 2500
const SHUTTING_DOWN = /the process is shutting down/

let pool: pg.Pool
let table: string

/** A promise and the function that settles it. */
function later<T = void>() {
  let resolve!: (value: T) => void
  const promise = new Promise<T>((done) => {
    resolve = done
  })
  return { promise, resolve }
}

const rowOf = async (jobName: string): Promise<LeaseInfo | undefined> =>
  (await listLeases(pool, { table })).find((lease) => lease.jobName === jobName)

// What happened, filled in by `before`.
let drained: Promise<DrainResult>
let result: DrainResult
let elapsedMs: number
const sent: string[] = []
const afterDrain: Record<string, unknown> = {}
let slowSignal: AbortSignal | undefined
let slowCall: Promise<unknown>
let quickCall: Promise<unknown>
let quickSettledBeforeDrain = false
let claimingCall: Promise<unknown>
let claimingSettledBeforeDrain = false
const tickErrors: unknown[] = []

before(async () => {
  pool = await testPool({ max: 6 })
  table = await freshTable(pool, 'drain')
  const started = { slow: later(), tick: later(), quick: later() }

  // A tick that ignores its signal and never settles.
  slowCall = withCronLease(
    pool,
    'drain:slow',
    60_000,
    (ctx) => {
      slowSignal = ctx.signal
      started.slow.resolve()
      return new Promise(() => {})
    },
    { table },
  )
  slowCall.catch(() => {})
  await started.slow.promise
  // A leasedTick that honours its signal: it rejects with the reason.
  const tick = leasedTick(
    pool,
    'drain:tick',
    60_000,
    (ctx) =>
      new Promise((_, reject) => {
        started.tick.resolve()
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))
      }),
    { table, onError: (error) => void tickErrors.push(error) },
  )
  void tick()
  await started.tick.promise
  // node-cron's coordinator: the claim won, the task running (onComplete not called yet).
  const coordinator = leaseCoordinator(pool, { table, leaseMs: 60_000 })
  assert.equal(await coordinator.shouldRun('drain:node-cron:2026-12-01T09:00:00.000Z', 30_000), true)
  // A tick that settles well within the timeout.
  quickCall = withCronLease(
    pool,
    'drain:quick',
    60_000,
    async () => {
      started.quick.resolve()
      await delay(300)
      return 'done'
    },
    { table },
  )
  void quickCall.then(() => {
    quickSettledBeforeDrain = result === undefined
  })
  await started.quick.promise

  // A claim already sent, waiting on a row another transaction is inserting: it wins once that rolls back.
  const blocker = await pool.connect()
  await blocker.query('BEGIN')
  await blocker.query(`INSERT INTO "${table}" (job_name, lease_until) VALUES ('drain:claiming', clock_timestamp())`)
  claimingCall = withCronLease(pool, 'drain:claiming', 60_000, () => 'ran', { table })
  void claimingCall.then(() => {
    claimingSettledBeforeDrain = result === undefined
  })
  // The claim, which a claimant that keeps the history sends as a WITH around its INSERT.
  const waiting =
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND (query LIKE 'INSERT%' OR query LIKE 'WITH before%')"
  while ((await pool.query(waiting)).rows[0].n === 0) await delay(20)

  const startedAt = performance.now()
  drained = drainLeases({ timeoutMs: TIMEOUT_MS })

  // From the call on, through a handle that logs every statement sent.
  const counted: Queryable = {
    query: (text: string, params: unknown[]) => {
      sent.push(text)
      return pool.query(text, params)
    },
  }
  afterDrain.withCronLease = await withCronLease(counted, 'drain:new', 60_000, () => 'ran', { table })
  afterDrain.leasedTick = await leasedTick(counted, 'drain:new-tick', 60_000, () => 'ran', { table })()
  afterDrain.catchUp = await catchUp(counted, 'drain:new-catch-up', 60_000, () => 'ran', { table, withinMs: 60_000 })
  await blocker.query('ROLLBACK')
  blocker.release()
  afterDrain.shouldRun = await leaseCoordinator(counted, { table }).shouldRun(
    'drain:new-task:2026-12-01T09:00:00.000Z',
    30_000,
  )

  result = await drained
  elapsedMs = performance.now() - startedAt
})

after(async () => {
  await pool.end()
})

describe('drainLeases: no claim from the call on; waits for the runs in flight; stops those past the timeout', () => {
  test('from the call on, every entry point resolves not run, and sends no query', () => {
    assert.deepEqual(afterDrain, {
      withCronLease: { ran: false, result: null },
      leasedTick: { ran: false, result: null },
      catchUp: { ran: false, result: null },
      shouldRun: false,
    })
    assert.deepEqual(sent, [])
  })

  test('a tick that settles within the timeout is waited for, and its outcome recorded', async () => {
    assert.deepEqual(await quickCall, { ran: true, result: 'done' })
    assert.equal(quickSettledBeforeDrain, true, 'drainLeases resolved after it')
    assert.equal((await rowOf('drain:quick'))?.lastOutcome, 'ok')
  })

  test('a claim sent before the call, won after it, runs its tick, and is waited for', async () => {
    assert.deepEqual(await claimingCall, { ran: true, result: 'ran' })
    assert.equal(claimingSettledBeforeDrain, true, 'drainLeases resolved after it')
    assert.equal((await rowOf('drain:claiming'))?.lastOutcome, 'ok')
  })

  test('at timeoutMs a tick still running has ctx.signal aborted, saying the process is shutting down', async () => {
    assert.ok(elapsedMs >= TIMEOUT_MS - 1, `waited the whole timeout first (${elapsedMs} ms)`)
    assert.equal(slowSignal?.aborted, true)
    const reason = slowSignal.reason as Error
    assert.match(reason.message, SHUTTING_DOWN)
    assert.ok(
      reason.message.includes(`'drain:slow' was still going after drainLeases' timeoutMs (${TIMEOUT_MS} ms)`),
      reason.message,
    )
    // The call is over, though the tick ignored its signal: it rejects with the reason.
    await assert.rejects(slowCall, (error) => error === reason)
    assert.equal(tickErrors.length, 1)
    assert.match((tickErrors[0] as Error).message, SHUTTING_DOWN)
  })

  test('each run stopped is recorded as an error saying the process was shutting down', async () => {
    for (const jobName of ['drain:slow', 'drain:tick', 'drain:node-cron']) {
      const row = await rowOf(jobName)
      assert.equal(row?.lastOutcome, 'error', jobName)
      assert.match(row?.lastError ?? '', SHUTTING_DOWN, jobName)
      // The run history has the run once, an error that says so.
      const runs = await listRuns(pool, { table, jobName })
      assert.equal(runs.length, 1, jobName)
      assert.equal(runs[0]!.outcome, 'error', jobName)
      assert.match(runs[0]!.error ?? '', SHUTTING_DOWN, jobName)
      assert.notEqual(runs[0]!.finishedAt, null, jobName)
    }
  })

  test('it resolves with the job names still running, in the order their runs started', () => {
    assert.deepEqual(result, { timedOut: ['drain:slow', 'drain:tick', 'drain:node-cron'] })
    assert.ok(Object.isFrozen(result) && Object.isFrozen(result.timedOut))
  })

  test('a second call returns the first call’s promise; bad options still reject with a TypeError', async () => {
    assert.equal(drainLeases(), drained)
    assert.equal(drainLeases({ timeoutMs: 5 }), drained)
    await assert.rejects(drainLeases({ timeoutMs: -1 }), { name: 'TypeError', message: /opts\.timeoutMs/ })
    await assert.rejects(drainLeases({ table: 'x' } as never), { name: 'TypeError', message: /table/ })
  })
})

describe('drainLeases in a SIGTERM handler', () => {
  test('two SIGTERMs: one drain, the tick aborted and recorded, the same result twice, and a clean exit', {
    timeout: 30_000,
  }, async () => {
    const sigtermTable = await freshTable(pool, 'drain_sigterm')
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/drain-on-sigterm.ts', sigtermTable], {
      env: { ...process.env, DATABASE_URL: await testDatabaseUrl() },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const exited = finished(child, { killAfterMs: 25_000 })
    let printed = ''
    const line = (text: string) =>
      new Promise<void>((resolve) => {
        const seen = () => printed.includes(text) && resolve()
        child.stdout.on('data', (chunk: Buffer) => {
          printed += chunk
          seen()
        })
        seen()
      })
    await Promise.race([line('started'), exited])
    child.kill('SIGTERM')
    // Two signals sent at once may arrive as one: the second goes once the first is being handled.
    await Promise.race([line('draining (SIGTERM 1)'), exited])
    child.kill('SIGTERM')
    const { code, stdout, stderr } = await exited
    assert.equal(code, 0, stderr)
    const lines = stdout.split('\n').filter((line) => line.startsWith('{'))
    assert.deepEqual(lines, ['{"timedOut":["sigterm"]}', '{"timedOut":["sigterm"]}'], stdout)
    assert.match(stdout, /aborted: .*the process is shutting down/)
    const row = (await listLeases(pool, { table: sigtermTable })).find((lease) => lease.jobName === 'sigterm')
    assert.equal(row?.lastOutcome, 'error')
    assert.match(row?.lastError ?? '', SHUTTING_DOWN)
  })
})
