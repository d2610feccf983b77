/**
 * Catching up after the whole fleet was down: `catchUp` runs a job once when its due time passed
 * unclaimed, for the latest occurrence due, with the ones before it counted in `ctx.missed`; never
 * past the window, never for a job with no due time, and once across a fleet that starts at once.
 *
 * The fleet's downtime is written into the row (its due time set in the past by the database
 * clock) rather than waited for, so the count of occurrences missed is exact.
 */
import assert from 'node:assert/strict'
import diagnostics from 'node:diagnostics_channel'
import { after, before, describe, test } from 'node:test'
import cron from 'node-cron'
import pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import {
  type CatchUpOptions,
  CHANNELS,
  type ClaimMessage,
  catchUp,
  leaseCoordinator,
  leasedTick,
  listLeases,
  MAX_INTERVAL_MS,
  quoteTable,
  type RunEndMessage,
  withCronLease,
} from '../../../src/index.ts'
import { collectingLogger, originalShapeTable } from '../../helpers/occurrence-replicas.ts'

const EVERY_MS = 60_000
const LEASE_MS = 50_000

let pool: pg.Pool
before(async () => {
  pool = await testPool()
})
after(() => pool.end())

/** The database clock now, whole ms since the epoch. */
async function dbNow(): Promise<number> {
  const { rows } = await pool.query(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms`)
  return Number(rows[0].ms)
}

/**
 * A job whose fleet stopped: it last ran for the occurrence one interval before its next due time,
 * which is set to `dueAgoMs` before now by the database clock, and its lease has expired. Resolves
 * the due time.
 */
async function stoppedJob(table: string, job: string, dueAgoMs: number): Promise<number> {
  const due = (await dbNow()) - dueAgoMs
  const ranFor = due - EVERY_MS
  const ran = await withCronLease(pool, job, LEASE_MS, () => {}, {
    table,
    occurrence: new Date(Math.min(ranFor, Date.now())),
    everyMs: EVERY_MS,
  })
  assert.equal(ran.ran, true)
  // As the row stood when the fleet stopped: claimed at its occurrence, due one interval on.
  await pool.query(
    `UPDATE ${quoteTable(table)} SET claimed_at = $2::timestamptz, last_occurrence = $2::timestamptz,
       next_due_at = $3::timestamptz, lease_until = clock_timestamp() - interval '1 second'
     WHERE job_name = $1`,
    [job, new Date(ranFor).toISOString(), new Date(due).toISOString()],
  )
  return due
}

/** What a catch-up run was told, or null when there was none. */
async function caughtUp(table: string, job: string, opts: Partial<CatchUpOptions> = {}, db: pg.Pool = pool) {
  const outcome = await catchUp(
    db,
    job,
    LEASE_MS,
    (ctx) => ({ occurrence: ctx.occurrence?.getTime() ?? null, missed: ctx.missed }),
    { table, withinMs: 3 * EVERY_MS, everyMs: EVERY_MS, ...opts },
  )
  return outcome.ran ? outcome.result : null
}

async function rowOf(table: string, job: string) {
  const { rows } = await pool.query(
    `SELECT (extract(epoch FROM last_occurrence) * 1000)::float8 AS occurrence_ms,
       (extract(epoch FROM next_due_at) * 1000)::float8 AS next_due_ms,
       last_missed::int AS last_missed, missed_occurrences::int AS missed_total
     FROM ${quoteTable(table)} WHERE job_name = $1`,
    [job],
  )
  return rows[0]
}

describe('catching up once after the fleet was down', () => {
  test('three occurrences missed: one run, for the latest, told the two before it were missed', async () => {
    const table = await freshTable(pool, 'catchup')
    const job = 'catchup:three'
    // Due 2.5 intervals ago: the occurrences at -2.5, -1.5 and -0.5 intervals were all missed.
    const due = await stoppedJob(table, job, 2.5 * EVERY_MS)
    const latest = due + 2 * EVERY_MS
    assert.deepEqual(await caughtUp(table, job), { occurrence: latest, missed: 2 })
    const row = await rowOf(table, job)
    assert.equal(row.occurrence_ms, latest, 'the run is keyed on the occurrence it made up for')
    assert.equal(row.next_due_ms, latest + EVERY_MS, 'and the job is due again one interval after it')
    assert.equal(row.last_missed, 2)
    assert.equal(row.missed_total, 2)
  })

  test('one occurrence missed: one run, for it, with nothing missed', async () => {
    const table = await freshTable(pool, 'catchup')
    const due = await stoppedJob(table, 'catchup:one', 0.5 * EVERY_MS)
    assert.deepEqual(await caughtUp(table, 'catchup:one'), { occurrence: due, missed: 0 })
  })

  test('the fleet starting at once, eight replicas with pools of their own: exactly one catch-up run', async () => {
    const table = await freshTable(pool, 'catchup')
    const job = 'catchup:fleet'
    const due = await stoppedJob(table, job, 2.5 * EVERY_MS)
    const url = await testDatabaseUrl()
    const pools = Array.from({ length: 8 }, () => new pg.Pool({ connectionString: url, max: 2 }))
    try {
      const runs = await Promise.all(pools.map((replica) => caughtUp(table, job, {}, replica)))
      assert.deepEqual(
        runs.filter((run) => run !== null),
        [{ occurrence: due + 2 * EVERY_MS, missed: 2 }],
      )
      const again = await Promise.all(pools.map((replica) => caughtUp(table, job, {}, replica)))
      assert.deepEqual(
        again.filter((run) => run !== null),
        [],
        'started again: nothing left to catch up',
      )
    } finally {
      await Promise.all(pools.map((p) => p.end()))
    }
  })

  test('after the catch-up, a late replica cannot run the occurrence made up for, and the next run misses none', async () => {
    const table = await freshTable(pool, 'catchup')
    const job = 'catchup:then-late'
    const latest = (await stoppedJob(table, job, 2.5 * EVERY_MS)) + 2 * EVERY_MS
    assert.notEqual(await caughtUp(table, job), null)
    // An interval later, so that the next occurrence has come: the row's times move back by one.
    await pool.query(
      `UPDATE ${quoteTable(table)} SET claimed_at = claimed_at - $2 * interval '1 millisecond',
         last_occurrence = last_occurrence - $2 * interval '1 millisecond',
         next_due_at = next_due_at - $2 * interval '1 millisecond', lease_until = clock_timestamp() - interval '1 second'
       WHERE job_name = $1`,
      [job, EVERY_MS],
    )
    const madeUpFor = latest - EVERY_MS
    const claim = (occurrence: number) =>
      withCronLease(pool, job, LEASE_MS, (ctx) => ctx.missed, {
        table,
        occurrence: new Date(occurrence),
        everyMs: EVERY_MS,
      })
    assert.equal((await claim(madeUpFor)).ran, false, 'the occurrence it made up for')
    assert.equal((await claim(madeUpFor - EVERY_MS)).ran, false, 'one it skipped')
    assert.deepEqual(await claim(madeUpFor + EVERY_MS), { ran: true, result: 0 })
    assert.equal((await rowOf(table, job)).missed_total, 2, 'the skipped ones are counted once')
  })
})

describe('when catching up runs nothing', () => {
  test('the latest occurrence due fell due longer ago than withinMs', async () => {
    const table = await freshTable(pool, 'catchup')
    const job = 'catchup:outside'
    // The latest due is half an interval ago.
    await stoppedJob(table, job, 2.5 * EVERY_MS)
    assert.equal(await caughtUp(table, job, { withinMs: 0.4 * EVERY_MS }), null)
    assert.notEqual(await caughtUp(table, job, { withinMs: 0.6 * EVERY_MS }), null, 'a wider window does')
  })

  test('a fresh table: no row, and none is written', async () => {
    const table = await freshTable(pool, 'catchup')
    assert.equal(await caughtUp(table, 'catchup:fresh'), null)
    assert.deepEqual((await listLeases(pool, { table })).length, 0)
  })

  test('a job with no next due time: claimed without an occurrence or an interval', async () => {
    const table = await freshTable(pool, 'catchup')
    const job = 'catchup:no-due'
    assert.equal((await withCronLease(pool, job, LEASE_MS, () => {}, { table })).ran, true)
    await pool.query(
      `UPDATE ${quoteTable(table)} SET claimed_at = claimed_at - interval '1 hour',
         lease_until = clock_timestamp() - interval '1 second' WHERE job_name = $1`,
      [job],
    )
    assert.equal((await rowOf(table, job)).next_due_ms, null)
    assert.equal(await caughtUp(table, job), null)
  })

  test('the lease is still held', async () => {
    const table = await freshTable(pool, 'catchup')
    const job = 'catchup:held'
    await stoppedJob(table, job, 1.5 * EVERY_MS)
    await pool.query(
      `UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() + interval '1 minute' WHERE job_name = $1`,
      [job],
    )
    assert.equal(await caughtUp(table, job), null)
  })

  test('the job is not yet due', async () => {
    const table = await freshTable(pool, 'catchup')
    const job = 'catchup:not-due'
    await stoppedJob(table, job, -0.5 * EVERY_MS)
    assert.equal(await caughtUp(table, job), null)
  })

  test('a table of the original shape: nothing, with one warning naming the upgrade', async () => {
    const table = await originalShapeTable(pool)
    const { logger, warns } = collectingLogger()
    await pool.query(
      `INSERT INTO ${quoteTable(table)} (job_name, lease_until, claimed_at) VALUES ('job', clock_timestamp() - interval '1 hour', clock_timestamp() - interval '2 hours')`,
    )
    for (let i = 0; i < 3; i++) assert.equal(await caughtUp(table, 'job', { logger }), null)
    assert.equal(warns.length, 1, JSON.stringify(warns))
    assert.match(warns[0]!, /pg-cron-lease migrate --table /)
  })
})

describe('every window and interval the checks accept works', () => {
  test('withinMs of Number.MAX_SAFE_INTEGER ("always") catches up, by catchUp and through leasedTick, with no error', async () => {
    const table = await freshTable(pool, 'catchup_always')
    await stoppedJob(table, 'always', 10 * EVERY_MS)
    const made = await caughtUp(table, 'always', { withinMs: Number.MAX_SAFE_INTEGER })
    assert.ok(made !== null, 'one run, however long ago it fell due')
    await stoppedJob(table, 'ticked', 10 * EVERY_MS)
    const errors: unknown[] = []
    const tick = leasedTick(pool, 'ticked', LEASE_MS, () => 'made up', {
      table,
      everyMs: EVERY_MS,
      catchUp: { withinMs: Number.MAX_SAFE_INTEGER },
      onError: (error) => void errors.push(error),
    })
    assert.deepEqual(await tick.caughtUp, { ran: true, result: 'made up' })
    assert.deepEqual(errors, [])
  })

  test('the longest everyMs accepted stores a next due time that reads back as a Date; a longer one is refused before any query', async () => {
    const table = await freshTable(pool, 'catchup_long')
    await withCronLease(pool, 'decade', LEASE_MS, () => {}, { table, everyMs: MAX_INTERVAL_MS })
    const [lease] = await listLeases(pool, { table })
    assert.ok(lease?.nextDueAt !== null, 'a due time was stored')
    assert.ok(Number.isFinite(new Date(lease!.nextDueAt!).getTime()), `it parses: ${lease?.nextDueAt}`)
    await assert.rejects(
      withCronLease(pool, 'longer', LEASE_MS, () => {}, { table, everyMs: MAX_INTERVAL_MS + 1 }),
      (error: unknown) => error instanceof TypeError && /opts\.everyMs must be/.test(error.message),
    )
    assert.equal((await listLeases(pool, { table })).length, 1, 'nothing was written for the refused call')
  })
})

describe("the node-cron coordinator catches a watched task up by the task's own execute()", () => {
  // Resolves once `claims` catch-up claims of `job` were answered and one of its runs has ended.
  function settled(job: string, claims: number): Promise<RunEndMessage> {
    return new Promise((resolve, reject) => {
      let answered = 0
      let ended: RunEndMessage | undefined
      const timer = setTimeout(
        () => done(new Error(`${answered} claims answered, ended: ${ended !== undefined}`)),
        20_000,
      )
      const onClaim = (m: unknown) => {
        if ((m as ClaimMessage).jobName === job) answered++
        if (answered >= claims && ended !== undefined) done()
      }
      const onEnd = (m: unknown) => {
        if ((m as RunEndMessage).jobName !== job) return
        ended = m as RunEndMessage
        if (answered >= claims) done()
      }
      function done(error?: Error) {
        clearTimeout(timer)
        diagnostics.unsubscribe(CHANNELS.claim, onClaim)
        diagnostics.unsubscribe(CHANNELS.runEnd, onEnd)
        if (error) reject(error)
        else resolve(ended!)
      }
      diagnostics.subscribe(CHANNELS.claim, onClaim)
      diagnostics.subscribe(CHANNELS.runEnd, onEnd)
    })
  }

  // Two replicas watch the same task, which is not due again for months: only a catch-up can run it.
  function watchOnTwoReplicas(table: string, job: string, body: () => void) {
    return [1, 2].map(() => {
      const coordinator = leaseCoordinator(pool, { table, leaseMs: LEASE_MS, catchUp: { withinMs: 3_600_000 } })
      const task = cron.schedule('0 0 1 1 *', body, { name: job, distributed: true, runCoordinator: coordinator })
      return coordinator.watch(task)
    })
  }

  test('a stopped job runs once across two replicas, for its missed occurrence, and is recorded ok', async () => {
    const table = await freshTable(pool, 'catchup_coordinator')
    await stoppedJob(table, 'report', 2 * EVERY_MS)
    let runs = 0
    const ended = settled('report', 2)
    const tasks = watchOnTwoReplicas(table, 'report', () => void runs++)
    try {
      const end = await ended
      assert.equal(end.outcome, 'ok')
      assert.equal(runs, 1, 'one replica ran it, by execute(); the other lost the claim')
      const [lease] = await listLeases(pool, { table })
      assert.equal(lease?.lastOutcome, 'ok')
    } finally {
      for (const task of tasks) await task.destroy()
    }
  })

  test('a task that throws when caught up is recorded as that error', async () => {
    const table = await freshTable(pool, 'catchup_coordinator_fails')
    await stoppedJob(table, 'flaky', 2 * EVERY_MS)
    const ended = settled('flaky', 2)
    const tasks = watchOnTwoReplicas(table, 'flaky', () => {
      throw new Error('the report server is down')
    })
    try {
      const end = await ended
      assert.equal(end.outcome, 'error')
      const [lease] = await listLeases(pool, { table })
      assert.equal(lease?.lastOutcome, 'error')
      assert.match(lease?.lastError ?? '', /the report server is down/)
    } finally {
      for (const task of tasks) await task.destroy()
    }
  })
})
