/**
 * The run history: one row per run, tied to its occurrence, bounded per job as each row is written,
 * with the runs that died mid-tick among them; and tables without it keep working as before.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { main } from '../../../src/cli/main.ts'
import {
  catchUp,
  createTableSql,
  historyTableOf,
  listLeases,
  listRuns,
  pauseJob,
  type RunInfo,
  upgradeTableSql,
  withCronLease,
} from '../../../src/index.ts'
import { claim } from '../../../src/lease.ts'
import { CURRENT_COLUMN_NAMES, quoteTable } from '../../../src/sql.ts'
import { SHAPE_READ } from '../../../src/table-facts.ts'
import { dyingReplica } from '../../helpers/child.ts'

let pool: pg.Pool
let table: string
let job = 0
const nextJob = () => `history-${++job}`

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'history')
})
after(() => pool.end())

const runsOf = (jobName: string, t = table) => listRuns(pool, { table: t, jobName, limit: 1000 })

/** Rows in the history table itself, for one job. */
async function storedRows(jobName: string, t = table): Promise<number> {
  const { rows } = await pool.query(
    `SELECT count(*)::int AS n FROM ${quoteTable(historyTableOf(t))} WHERE job_name = $1`,
    [jobName],
  )
  return rows[0].n
}

const HOUR = 3_600_000

describe('each run is one row, with the right fields', () => {
  test('an ok run, an error run and a catch-up each appear exactly once', async () => {
    const name = nextJob()
    const occurrence = new Date(Date.now() - 10 * HOUR - (Date.now() % HOUR))
    await withCronLease(pool, name, 1, () => 'done', { table, holder: 'a', occurrence, everyMs: HOUR })
    await assert.rejects(
      withCronLease(pool, name, 1, () => Promise.reject(new RangeError('bad input\nsecond line')), {
        table,
        holder: 'b',
        occurrence: new Date(occurrence.getTime() + HOUR),
        everyMs: HOUR,
      }),
      RangeError,
    )
    // Hours pass with no claim: two occurrences fall due unclaimed, and the catch-up runs the latest.
    await pool.query(
      `UPDATE ${quoteTable(table)} SET next_due_at = at.past + interval '90 minutes', claimed_at = at.past, last_started_at = at.past
       FROM (SELECT clock_timestamp() - interval '3 hours' AS past) AS at WHERE job_name = $1`,
      [name],
    )
    const caught = await catchUp(pool, name, 1, () => 'caught up', {
      table,
      holder: 'c',
      withinMs: 4 * HOUR,
      everyMs: HOUR,
    })
    assert.equal(caught.ran, true)

    const runs = await runsOf(name)
    assert.deepEqual(
      runs.map((r) => [r.holder, r.outcome, r.catchUp]),
      [
        ['c', 'ok', true],
        ['b', 'error', false],
        ['a', 'ok', false],
      ],
      'newest first',
    )
    const [caughtUp, failed, ok] = runs as [RunInfo, RunInfo, RunInfo]
    assert.equal(ok.occurrence, occurrence.toISOString().replace('Z', '000Z'))
    assert.equal(failed.occurrence, new Date(occurrence.getTime() + HOUR).toISOString().replace('Z', '000Z'))
    assert.equal(failed.error, 'RangeError: bad input')
    assert.equal(ok.error, null)
    for (const run of runs) {
      assert.equal(run.jobName, name)
      assert.equal(run.startedAt, run.claimedAt)
      assert.match(run.claimedAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/)
      assert.ok(
        run.finishedAt !== null && run.finishedAt >= run.startedAt,
        'finished after it started, by the database clock',
      )
      assert.ok(typeof run.durationMs === 'number' && run.durationMs >= 0)
    }
    assert.ok(caughtUp.occurrence !== null, 'a catch-up names the occurrence it made up for')
    assert.ok(caughtUp.missed >= 1, `the occurrences it skipped: ${caughtUp.missed}`)
    assert.equal(await storedRows(name), 3)
  })

  test('a lease-only claim has no occurrence; history: false writes no row, and the lease row is still recorded', async () => {
    const name = nextJob()
    await withCronLease(pool, name, 1, () => 1, { table })
    await expireLease(pool, table, name)
    await withCronLease(pool, name, 1, () => 1, { table, history: false })
    const runs = await runsOf(name)
    assert.equal(runs.length, 1)
    assert.equal(runs[0]!.occurrence, null)
    const [lease] = (await listLeases(pool, { table })).filter((l) => l.jobName === name)
    assert.equal(lease?.lastOutcome, 'ok')
    assert.notEqual(lease?.lastFinishedAt, null)
    assert.ok(lease!.lastFinishedAt! > runs[0]!.finishedAt!, 'the second run was recorded in the lease row')
  })

  test('a run whose successor took it for dead, finishing after all, keeps its real outcome, once', async () => {
    const name = nextJob()
    let finish!: () => void
    const first = withCronLease(pool, name, 200, () => new Promise<void>((resolve) => (finish = resolve)), {
      table,
      holder: 'slow',
    })
    await waitFor(() => finish !== undefined)
    await expireLease(pool, table, name)
    await withCronLease(pool, name, 1, () => 1, { table, holder: 'next' })
    finish()
    await first
    const runs = await runsOf(name)
    assert.deepEqual(
      runs.map((r) => [r.holder, r.outcome]),
      [
        ['next', 'ok'],
        ['slow', 'ok'],
      ],
    )
    assert.equal(await storedRows(name), 2)
  })
  test('a run that ends after its successor claimed, before that run is recorded, is written as it ended, once', async () => {
    const name = nextJob()
    let finishSlow!: () => void
    let finishNext!: () => void
    const slow = withCronLease(pool, name, 200, () => new Promise<void>((resolve) => (finishSlow = resolve)), {
      table,
      holder: 'slow',
    })
    await waitFor(() => finishSlow !== undefined)
    await expireLease(pool, table, name)
    const next = withCronLease(pool, name, 60_000, () => new Promise<void>((resolve) => (finishNext = resolve)), {
      table,
      holder: 'next',
    })
    await waitFor(() => finishNext !== undefined)
    assert.deepEqual(
      (await runsOf(name)).map((r) => [r.holder, r.outcome]),
      [
        ['next', 'running'],
        ['slow', 'unfinished'],
      ],
      'the slow run lost its lease: unfinished until it ends',
    )
    finishSlow()
    await slow
    assert.equal(await storedRows(name), 2, 'each run has its row from its claim on')
    assert.deepEqual(
      (await runsOf(name)).map((r) => [r.holder, r.outcome, r.finishedAt !== null]),
      [
        ['next', 'running', false],
        ['slow', 'ok', true],
      ],
      'listed as it ended, not as unfinished',
    )
    finishNext()
    await next
    const runs = await runsOf(name)
    assert.deepEqual(
      runs.map((r) => [r.holder, r.outcome]),
      [
        ['next', 'ok'],
        ['slow', 'ok'],
      ],
    )
    assert.ok(runs[1]!.durationMs !== null && runs[1]!.durationMs >= 0)
    assert.equal(await storedRows(name), 2)
  })
})

describe('a run that never finished is shown', () => {
  test('a replica killed mid-tick: unfinished, with its holder and occurrence, once its lease ended; kept once the job is next claimed', async () => {
    const name = nextJob()
    const occurrence = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 60_000)
    const { child, exit } = await dyingReplica({ table, job: name, occurrence, leaseMs: 1500 })
    child.kill('SIGKILL')
    const { signal } = await exit
    assert.equal(signal, 'SIGKILL')

    const held = await runsOf(name)
    assert.deepEqual(
      held.map((r) => [r.holder, r.outcome, r.occurrence]),
      [['dying', 'running', occurrence.toISOString().replace('Z', '000Z')]],
      'while its lease holds, it reads as running, with its holder and occurrence',
    )
    await expireLease(pool, table, name)
    const died = await runsOf(name)
    assert.equal(died.length, 1)
    assert.equal(died[0]!.outcome, 'unfinished')
    assert.equal(died[0]!.holder, 'dying')
    assert.equal(died[0]!.occurrence, occurrence.toISOString().replace('Z', '000Z'))
    assert.equal(died[0]!.finishedAt, null)
    assert.equal(died[0]!.durationMs, null)
    assert.equal(await storedRows(name), 1, 'written by its claim')

    const nextOccurrence = new Date(occurrence.getTime() + 60_000)
    const next = await withCronLease(pool, name, 1, () => 1, { table, holder: 'next', occurrence: nextOccurrence })
    assert.equal(next.ran, true)
    const after = await runsOf(name)
    assert.deepEqual(
      after.map((r) => [r.holder, r.outcome]),
      [
        ['next', 'ok'],
        ['dying', 'unfinished'],
      ],
    )
    assert.equal(await storedRows(name), 2)
  })

  test('runs that die in a row are each kept, not only the last', async () => {
    const name = nextJob()
    // Each claim is won and its run never recorded, as when its replica dies mid-tick.
    const die = (holder: string) =>
      claim({ db: pool, table, jobName: name, leaseMs: 1, holder, logger: undefined, prepare: true, record: true })
    for (let i = 0; i < 3; i++) {
      assert.notEqual(await die(`dead-${i}`), null)
      await expireLease(pool, table, name)
    }
    await withCronLease(pool, name, 1, () => 1, { table, holder: 'alive' })
    assert.deepEqual(
      (await runsOf(name)).map((r) => [r.holder, r.outcome]),
      [
        ['alive', 'ok'],
        ['dead-2', 'unfinished'],
        ['dead-1', 'unfinished'],
        ['dead-0', 'unfinished'],
      ],
    )
  })

  test('more runs dying in a row than the job keeps: only those it keeps are written', async () => {
    const name = nextJob()
    const history = { keep: 2, keepFailed: 1 }
    for (let i = 0; i < 5; i++) {
      const died = await claim({
        db: pool,
        table,
        jobName: name,
        leaseMs: 1,
        holder: `dead-${i}`,
        logger: undefined,
        prepare: true,
        record: true,
        history,
      })
      assert.notEqual(died, null)
      await expireLease(pool, table, name)
    }
    await withCronLease(pool, name, 1, () => 1, { table, holder: 'alive', history })
    assert.deepEqual(
      (await runsOf(name)).map((r) => [r.holder, r.outcome]),
      [
        ['alive', 'ok'],
        ['dead-4', 'unfinished'],
      ],
      'the last two runs, the newer of them the one failure kept',
    )
    assert.equal(await storedRows(name), 2)
  })

  test('a paused job whose run died shows that run once its own lease ended, not when the pause ends', async () => {
    const name = nextJob()
    const dead = await claim({
      db: pool,
      table,
      jobName: name,
      leaseMs: 1,
      holder: 'paused-run',
      logger: undefined,
      prepare: true,
      record: true,
    })
    assert.notEqual(dead, null)
    await pauseJob(pool, name, { forMs: HOUR, table })
    await new Promise((resolve) => setTimeout(resolve, 5))
    assert.deepEqual(
      (await runsOf(name)).map((r) => [r.holder, r.outcome]),
      [['paused-run', 'unfinished']],
      'the pause holds the lease row, not the run',
    )
  })
})

describe('a run the library was told not to record is never unfinished', () => {
  test('record: false ×3, then a recorded run: the history has the recorded run alone, and listLeases says ok', async () => {
    const name = nextJob()
    for (let i = 0; i < 3; i++) {
      await withCronLease(pool, name, 1, () => 1, { table, holder: `quiet-${i}`, record: false })
      await expireLease(pool, table, name)
      assert.deepEqual(await runsOf(name), [], 'a run told not to record is left out')
    }
    await withCronLease(pool, name, 1, () => 1, { table, holder: 'recorded' })
    await expireLease(pool, table, name)
    await withCronLease(pool, name, 1, () => 1, { table, holder: 'quiet-last', record: false })
    await expireLease(pool, table, name)
    assert.deepEqual(
      (await runsOf(name)).map((r) => [r.holder, r.outcome]),
      [['recorded', 'ok']],
    )
    const [lease] = (await listLeases(pool, { table })).filter((l) => l.jobName === name)
    assert.equal(lease?.lastOutcome, 'ok')
    assert.equal(lease?.lastEndedOutcome, 'ok')
  })

  test('history: false keeps no rows, but its run is still marked and recorded in the lease row', async () => {
    const name = nextJob()
    await withCronLease(pool, name, 60_000, () => 1, { table, history: false })
    assert.deepEqual(await runsOf(name), [])
    const [lease] = (await listLeases(pool, { table })).filter((l) => l.jobName === name)
    assert.equal(lease?.lastOutcome, 'ok')
    assert.notEqual(lease?.lastStartedAt, null)
  })
})

describe('one row per occurrence that ran, across replicas', () => {
  test('5 replicas over 40 occurrences: exactly one history row for each', { timeout: 60_000 }, async () => {
    const name = nextJob()
    const pools = await Promise.all(Array.from({ length: 5 }, () => testPool({ max: 2 }, 1)))
    const base = Math.floor(Date.now() / 1000) * 1000 - 100_000
    try {
      for (let i = 0; i < 40; i++) {
        const occurrence = new Date(base + i * 1000)
        const outcomes = await Promise.all(
          pools.map((db, replica) =>
            withCronLease(db, name, 1, () => replica, {
              table,
              holder: `replica-${replica}`,
              occurrence,
              everyMs: 1000,
            }),
          ),
        )
        assert.equal(outcomes.filter((o) => o.ran).length, 1, `one winner for occurrence ${i}`)
      }
    } finally {
      await Promise.all(pools.map((db) => db.end()))
    }
    const runs = await runsOf(name)
    assert.equal(runs.length, 40)
    assert.equal(new Set(runs.map((r) => r.occurrence)).size, 40, 'each occurrence once')
    assert.ok(runs.every((r) => r.outcome === 'ok'))
    assert.deepEqual(
      runs.map((r) => Date.parse(r.occurrence!)).reverse(),
      Array.from({ length: 40 }, (_, i) => base + i * 1000),
    )
  })
})

describe('bounded per job when each row is written', () => {
  test('250 runs keep N + M rows at most, the failures among them however old; another job is untouched', {
    timeout: 60_000,
  }, async () => {
    const name = nextJob()
    const other = nextJob()
    await withCronLease(pool, other, 1, () => 1, { table })
    const history = { keep: 100, keepFailed: 20 }
    // The first five runs fail, then 245 succeed: the five stay, beyond the last hundred.
    for (let i = 0; i < 250; i++) {
      const outcome = withCronLease(pool, name, 1, () => (i < 5 ? Promise.reject(new Error(`run ${i}`)) : i), {
        table,
        history,
      })
      if (i < 5) await assert.rejects(outcome)
      else assert.equal((await outcome).ran, true)
      await expireLease(pool, table, name)
    }
    const stored = await storedRows(name)
    assert.ok(stored <= 120, `at most N + M rows: ${stored}`)
    const runs = await runsOf(name)
    assert.equal(runs.filter((r) => r.outcome === 'ok').length, 100, 'the last hundred runs')
    assert.deepEqual(
      runs
        .filter((r) => r.outcome === 'error')
        .map((r) => r.error)
        .reverse(),
      ['Error: run 0', 'Error: run 1', 'Error: run 2', 'Error: run 3', 'Error: run 4'],
    )
    assert.equal(await storedRows(other), 1, "another job's row is untouched")
  })

  test('keepFailed bounds the failures kept: 30 failures in a row leave the last N + M', async () => {
    const name = nextJob()
    for (let i = 0; i < 30; i++) {
      await assert.rejects(
        withCronLease(pool, name, 1, () => Promise.reject(new Error(`fail ${i}`)), {
          table,
          history: { keep: 5, keepFailed: 10 },
        }),
      )
      await expireLease(pool, table, name)
    }
    const runs = await runsOf(name)
    assert.ok(runs.length <= 15, `${runs.length} rows`)
    assert.equal(runs[0]!.error, 'Error: fail 29')
    assert.ok(runs.length >= 10, 'at least the last M failures')
  })

  test('the last N runs and the last M failures, however old: 6 failures then 10 runs leave 5 runs and 3 failures', async () => {
    const name = nextJob()
    const history = { keep: 5, keepFailed: 3 }
    for (let i = 0; i < 16; i++) {
      const outcome = withCronLease(pool, name, 1, () => (i < 6 ? Promise.reject(new Error(`fail ${i}`)) : i), {
        table,
        history,
      })
      await (i < 6 ? assert.rejects(outcome) : outcome)
      await expireLease(pool, table, name)
    }
    assert.deepEqual(
      (await runsOf(name)).map((r) => r.error ?? r.outcome),
      ['ok', 'ok', 'ok', 'ok', 'ok', 'Error: fail 5', 'Error: fail 4', 'Error: fail 3'],
    )
  })

  test('a lower keep trims the job to it at its next run; a lower keepFailed at its next failed run', async () => {
    const name = nextJob()
    const runOnce = async (history: { keep: number; keepFailed: number }, fail = false) => {
      const outcome = withCronLease(pool, name, 1, () => (fail ? Promise.reject(new Error('failed')) : 1), {
        table,
        history,
      })
      await (fail ? assert.rejects(outcome) : outcome)
      await expireLease(pool, table, name)
    }
    for (let i = 0; i < 4; i++) await runOnce({ keep: 2, keepFailed: 10 }, true)
    for (let i = 0; i < 30; i++) await runOnce({ keep: 30, keepFailed: 10 })
    assert.equal(await storedRows(name), 34)
    await runOnce({ keep: 5, keepFailed: 10 })
    assert.equal(await storedRows(name), 9, 'the last 5 runs and the 4 failures')
    await runOnce({ keep: 5, keepFailed: 1 })
    assert.equal(await storedRows(name), 9, 'failures stay until the next one fails')
    await runOnce({ keep: 5, keepFailed: 1 }, true)
    const runs = await runsOf(name)
    assert.equal(runs.length, 5, 'the last 5 runs, the newest of them the one failure kept')
    assert.deepEqual(
      runs.map((r) => r.outcome),
      ['error', 'ok', 'ok', 'ok', 'ok'],
    )
  })

  test('a job whose lease row was deleted numbers its runs on from its history', async () => {
    const name = nextJob()
    for (let i = 0; i < 3; i++) {
      await withCronLease(pool, name, 1, () => i, { table })
      await expireLease(pool, table, name)
    }
    await pool.query(`DELETE FROM ${quoteTable(table)} WHERE job_name = $1`, [name])
    const warnings: string[] = []
    const logger = { warn: (m: string) => void warnings.push(m) }
    for (let i = 0; i < 2; i++) {
      await withCronLease(pool, name, 1, () => i, { table, logger })
      await expireLease(pool, table, name)
    }
    assert.deepEqual(warnings, [])
    assert.equal((await runsOf(name)).length, 5)
  })

  test('listRuns pages with before, newest first, and names the bad option', async () => {
    const name = nextJob()
    for (let i = 0; i < 5; i++) {
      await withCronLease(pool, name, 1, () => i, { table })
      await expireLease(pool, table, name)
    }
    const firstPage = await listRuns(pool, { table, jobName: name, limit: 2 })
    const secondPage = await listRuns(pool, { table, jobName: name, limit: 2, before: firstPage[1]!.startedAt })
    const all = await listRuns(pool, { table, jobName: name })
    assert.deepEqual(
      [...firstPage, ...secondPage].map((r) => r.claimedAt),
      all.slice(0, 4).map((r) => r.claimedAt),
    )
    await assert.rejects(
      listRuns(pool, { table, limit: 0 }),
      /opts\.limit must be a whole number from 1 to 10000, got 0/,
    )
    await assert.rejects(listRuns(pool, { table, before: 'yesterday' }), /opts\.before/)
  })
})

describe('tables without the history keep working', () => {
  /** A table of the current shape from before the history: every current column, no history. */
  async function currentWithoutHistory(): Promise<string> {
    const name = `nohistory_${randomBytes(4).toString('hex')}`
    const columns = CURRENT_COLUMN_NAMES.map(
      (c) =>
        `${c} ${/_at$|_until$|occurrence$/.test(c) ? 'timestamptz' : c.endsWith('_ms') ? 'float8' : /missed/.test(c) ? 'bigint' : 'text'}`,
    )
    await pool.query(`CREATE TABLE "${name}" (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL,
      holder TEXT, claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), ${columns.join(', ')})`)
    return name
  }

  test('the current shape without its history: occurrence keys, outcome record and pause hold; one warning names migrate', async () => {
    const t = await currentWithoutHistory()
    const name = nextJob()
    const warnings: string[] = []
    const logger = { warn: (m: string) => void warnings.push(m) }
    const occurrence = new Date(Math.floor(Date.now() / 1000) * 1000 - 5000)
    assert.equal((await withCronLease(pool, name, 1, () => 1, { table: t, occurrence, logger })).ran, true)
    assert.equal((await withCronLease(pool, name, 1, () => 1, { table: t, occurrence, logger })).ran, false, 'keyed')
    await withCronLease(pool, name, 1, () => 1, { table: t, occurrence: new Date(occurrence.getTime() + 1000), logger })
    const [lease] = (await listLeases(pool, { table: t })).filter((l) => l.jobName === name)
    assert.equal(lease?.lastOutcome, 'ok', 'the outcome is recorded')
    assert.equal(await pauseJob(pool, name, { table: t, forMs: 60_000 }), true)
    assert.equal(
      (await withCronLease(pool, name, 1, () => 1, { table: t, occurrence: new Date(occurrence.getTime() + 2000) }))
        .ran,
      false,
      'paused',
    )
    assert.equal(warnings.length, 1, warnings.join('\n'))
    assert.match(warnings[0]!, /no run history \(.*_runs.*pg-cron-lease migrate --table nohistory_/)
    await assert.rejects(listRuns(pool, { table: t }), /has no run history .*pg-cron-lease migrate --table/)
  })

  test('after upgradeTableSql, replicas write the history within a minute, with no restart', async () => {
    const t = await currentWithoutHistory()
    const name = nextJob()
    const logger = { warn() {} }
    await withCronLease(pool, name, 1, () => 1, { table: t, logger })
    await pool.query(upgradeTableSql(t))
    await pool.query(upgradeTableSql(t))
    const saved = SHAPE_READ.everyMs
    SHAPE_READ.everyMs = 0
    try {
      await expireLease(pool, t, name)
      await withCronLease(pool, name, 1, () => 1, { table: t, logger })
    } finally {
      SHAPE_READ.everyMs = saved
    }
    const runs = await listRuns(pool, { table: t, jobName: name })
    assert.equal(runs[0]?.outcome, 'ok')
    assert.equal(runs[0]?.holder?.includes(':'), true)
  })

  test('the original four-column table: claims decide by the lease alone, and no history is asked of it', async () => {
    const name = `original_${randomBytes(4).toString('hex')}`
    await pool.query(`CREATE TABLE "${name}" (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL,
      holder TEXT, claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`)
    const logger = { warn() {} }
    assert.equal((await withCronLease(pool, 'job', 60_000, () => 1, { table: name, logger })).ran, true)
    assert.equal((await withCronLease(pool, 'job', 60_000, () => 1, { table: name, logger })).ran, false)
    await assert.rejects(listRuns(pool, { table: name }), /pg-cron-lease migrate --table original_/)
  })

  test('createTableSql makes the history beside a new table, and never touches an existing one', async () => {
    const name = `fresh_${randomBytes(4).toString('hex')}`
    await pool.query(createTableSql(name))
    const { rows } = await pool.query('SELECT to_regclass($1) IS NOT NULL AS made', [quoteTable(historyTableOf(name))])
    assert.equal(rows[0].made, true)
  })
})

describe('pg-cron-lease history', () => {
  async function run(argv: string[]) {
    let stdout = ''
    let stderr = ''
    const code = await main(argv, {
      stdout: { write: (t: string) => (stdout += t) },
      stderr: { write: (t: string) => (stderr += t) },
      env: { DATABASE_URL: await testDatabaseUrl() },
    })
    return { code, stdout, stderr }
  }

  test('a table a person reads, with the missed occurrences as a line between runs; --format json is listRuns', async () => {
    const name = nextJob()
    const base = Math.floor(Date.now() / 1000) * 1000 - 60_000
    for (const i of [0, 1, 4]) {
      const occurrence = new Date(base + i * 1000)
      const tick = () => (i === 1 ? Promise.reject(new TypeError('no\x1b[31m colour')) : i)
      await withCronLease(pool, name, 1, tick, { table, holder: `h${i}`, occurrence, everyMs: 1000 }).catch(() => {})
    }
    const text = await run(['history', '--table', table, '--job', name])
    assert.equal(text.code, 0, text.stderr)
    const lines = text.stdout.split('\n')
    assert.match(lines[2]!, /^STARTED +OCCURRENCE +HOLDER +TOOK +OUTCOME$/)
    assert.match(lines[3]!, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z +\S+ \S+ +h4 +.+ +ok$/)
    assert.equal(lines[4], '  … 2 occurrences missed')
    assert.match(
      lines[5]!,
      / h1 .* error: TypeError: no \[31m colour$/,
      'the error, its control characters made spaces',
    )
    assert.match(lines[6]!, / h0 .* ok$/)
    const json = await run(['history', '--table', table, '--job', name, '--format', 'json', '--limit', '2'])
    assert.equal(json.code, 0, json.stderr)
    assert.deepEqual(JSON.parse(json.stdout), await listRuns(pool, { table, jobName: name, limit: 2 }))
    const every = await run(['history', '--table', table])
    assert.match(every.stdout, /^Runs in history_\w+, newest first/)
    assert.match(every.stdout, /\nJOB +STARTED/)
    assert.equal((await run(['history', '--table', table, '--limit', '0'])).code, 2)
    assert.equal((await run(['history', '--table', table, '--format', 'prometheus'])).code, 2)
  })
})

async function waitFor(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  assert.ok(condition(), 'waited 5 s')
}
