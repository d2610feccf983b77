/**
 * Admin statements and renews racing the moment a pause ends. A resume or a pause that waited for
 * the job's row lock while a claim committed must judge that claim by the clock after the wait,
 * and a pause that the original package's renew has broken no longer fences this package's renew.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { withCronLease as originalWithCronLease } from 'pg-cron-lease-original'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import { type LeaseContext, pauseJob, quoteTable, resumeJob, withCronLease } from '../../../src/index.ts'

/** Sends the statements under test; named so its waiting backend can be found in pg_stat_activity. */
let admin: pg.Pool
const adminName = `admin-races-${randomBytes(4).toString('hex')}`
/** Session X, which keeps the row locked, and the replica of the published 1.0.1. */
let sessions: pg.Pool
let rival: pg.Pool
let operator: pg.Pool
let table: string
let t: string
let jobs = 0
const nextJob = () => `races-${++jobs}`
const quiet = { warn() {}, debug() {} }

const CLAIM_MS = 5_000

before(async () => {
  operator = await testPool({ max: 2 })
  admin = await testPool({ max: 2, application_name: adminName })
  sessions = await testPool({ max: 2 })
  rival = await testPool({ max: 2 })
  table = await freshTable(operator, 'races')
  t = quoteTable(table)
  // The window between the pause and its end is short, so no connection is opened inside it.
  await Promise.all([admin, sessions, rival].map((pool) => pool.query('SELECT 1')))
})
after(async () => {
  await Promise.all([admin.end(), sessions.end(), rival.end(), operator.end()])
})

/** Polls `check` until it holds; throws saying what it waited for once `timeoutMs` has passed. */
async function until(what: string, check: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(5)
  }
}

/** The job's row as the database clock sees it now. */
async function rowOf(job: string) {
  const { rows } = await operator.query(
    `SELECT (extract(epoch FROM lease_until - claimed_at) * 1000)::float8 AS lease_ms,
       lease_until > clock_timestamp() AS held,
       coalesce(paused_until > clock_timestamp(), false) AS pause_running,
       isfinite(lease_until) AS finite_lease,
       paused_until::text AS paused_until
     FROM ${t} WHERE job_name = $1`,
    [job],
  )
  assert.equal(rows.length, 1, `the job ${job} has a row`)
  return rows[0] as {
    lease_ms: number
    held: boolean
    pause_running: boolean
    finite_lease: boolean
    paused_until: string
  }
}

const adminWaitsOnLock = async () => {
  const { rows } = await operator.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
    [adminName],
  )
  return rows[0].n === 1
}

/**
 * The race: a 300 ms pause is in force; session X locks the job's row in an open transaction;
 * `statement` is sent on another pool and waits for that lock; the pause runs out; X claims the job
 * with this package (a 5 s lease) and commits. Resolves once `statement` has finished.
 */
async function claimCommittedUnderWaitingStatement(job: string, statement: () => Promise<boolean>) {
  await withCronLease(operator, job, 1, () => {}, { table, logger: quiet })
  await until('the first lease to run out', async () => !(await rowOf(job)).held)
  const x = await sessions.connect()
  let sent: Promise<boolean> | undefined
  let settled = false
  let committed = false
  try {
    assert.equal(await pauseJob(operator, job, { table, forMs: 300 }), true)
    await x.query('BEGIN')
    await x.query(`SELECT 1 FROM ${t} WHERE job_name = $1 FOR UPDATE`, [job])
    sent = statement().finally(() => {
      settled = true
    })
    sent.catch(() => {})
    await until('the admin statement to wait on the row lock', async () => {
      assert.equal(settled, false, 'the admin statement finished without waiting for the row lock')
      return adminWaitsOnLock()
    })
    // Whatever the statement read of the clock before it waited, it read during the pause.
    assert.equal((await rowOf(job)).pause_running, true, 'the admin statement was sent while the pause was in force')
    await until('the pause to run out', async () => !(await rowOf(job)).pause_running)
    const claim = await withCronLease(x, job, CLAIM_MS, () => 'X ran', { table, holder: 'X', logger: quiet })
    assert.deepEqual(claim, { ran: true, result: 'X ran' }, 'X claims the job once the pause has run out')
    await x.query('COMMIT')
    committed = true
    assert.equal(await sent, true, 'the admin statement found the job')
  } finally {
    if (!committed) await x.query('ROLLBACK').catch(() => {})
    x.release()
    await sent?.catch(() => {})
  }
}

/** X's claim still holds its lease to its own end (5 s from its claim), and a rival's claim loses. */
async function assertClaimHolds(job: string) {
  const row = await rowOf(job)
  const rivalRan = (await withCronLease(rival, job, CLAIM_MS, () => {}, { table, holder: 'rival', logger: quiet })).ran
  assert.deepEqual(
    { ownEnd: row.lease_ms >= CLAIM_MS, held: row.held, rivalRan },
    { ownEnd: true, held: true, rivalRan: false },
    `the claim's lease ends ${row.lease_ms} ms after its claim`,
  )
}

describe('an admin statement that waited for the row lock judges the row by the clock after the wait', {
  timeout: 30_000,
}, () => {
  test('a resume sent during a pause, which waited while a claim committed after the pause ran out, leaves that claim its whole lease', async () => {
    const job = nextJob()
    await claimCommittedUnderWaitingStatement(job, () => resumeJob(admin, job, { table }))
    await assertClaimHolds(job)
  })

  test('a 350 ms pause sent during a pause, which waited while a claim committed after it ran out, holds the claim to its own end once it ends', async () => {
    const job = nextJob()
    await claimCommittedUnderWaitingStatement(job, () => pauseJob(admin, job, { table, forMs: 350 }))
    await until('the 350 ms pause to run out', async () => !(await rowOf(job)).pause_running)
    await assertClaimHolds(job)
  })
})

/**
 * A job whose open-ended pause a tick of the published 1.0.1 broke with its `renew(300)`, and whose
 * lease has since run out: the row still says paused until infinity, but nothing holds the lease.
 */
async function pauseBrokenByOriginalRenew(job: string) {
  let entered!: () => void
  const running = new Promise<void>((resolve) => {
    entered = resolve
  })
  let pausedNow!: () => void
  const paused = new Promise<void>((resolve) => {
    pausedNow = resolve
  })
  let renewed: boolean | undefined
  const tick = originalWithCronLease(
    sessions,
    job,
    60_000,
    async (ctx) => {
      entered()
      await paused
      renewed = await ctx.renew(300)
    },
    { table, holder: 'original' },
  )
  await running
  assert.equal(await pauseJob(operator, job, { table }), true)
  pausedNow()
  assert.equal((await tick).ran, true)
  assert.equal(renewed, true, "1.0.1's renew matches during the pause")
  const broken = await rowOf(job)
  assert.deepEqual(
    [broken.paused_until, broken.finite_lease],
    ['infinity', true],
    'the row still holds the open-ended pause, but the lease ends at a finite time',
  )
  await until("the 300 ms of 1.0.1's renew to run out", async () => !(await rowOf(job)).held)
}

describe("a pause broken by the original package's renew does not fence this package's renew", {
  timeout: 30_000,
}, () => {
  test('a claim by this package wins, and its renew resolves true', async () => {
    const job = nextJob()
    await pauseBrokenByOriginalRenew(job)
    let renewed: boolean | undefined
    const outcome = await withCronLease(
      admin,
      job,
      60_000,
      async (ctx: LeaseContext) => {
        renewed = await ctx.renew()
      },
      { table, holder: 'upgraded', logger: quiet },
    )
    assert.equal(outcome.ran, true, 'the claim wins')
    assert.equal(renewed, true, 'the renew matches the claim')
  })

  test('a run with keep-alive keeps its signal unaborted, and its beats extend the lease', async () => {
    const job = nextJob()
    await pauseBrokenByOriginalRenew(job)
    const leaseMs = 500
    let aborted: boolean | undefined
    const outcome = await withCronLease(
      admin,
      job,
      leaseMs,
      async (ctx: LeaseContext) => {
        // The tick's own work lasts 300 ms, about six beats; a refused beat ends it early.
        await sleep(300, undefined, { signal: ctx.signal }).catch(() => {})
        aborted = ctx.signal.aborted
      },
      { table, holder: 'upgraded', logger: quiet, keepAlive: { beatMs: 50, extendMs: 500 } },
    )
    assert.equal(outcome.ran, true, 'the claim wins')
    assert.equal(aborted, false, 'the signal was not aborted')
    const row = await rowOf(job)
    assert.ok(row.lease_ms > leaseMs, `the beats moved the lease past the claim's own: ${row.lease_ms} ms after it`)
  })
})
