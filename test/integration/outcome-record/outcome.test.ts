/**
 * What the lease row learns about each run (issue: know what ran, catch what didn't): the last
 * outcome, the interval and overdue detection, tables of the original shape, and the clock check.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import diagnostics from 'node:diagnostics_channel'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import cron from 'node-cron'
import type pg from 'pg'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { installSkew } from '../../../dev/skew-clock.ts'
import {
  CHANNELS,
  type ClaimMessage,
  forInterval,
  type LeaseInfo,
  leaseCoordinator,
  leasedTick,
  leaseForInterval,
  listLeases,
  type Queryable,
  upgradeTableSql,
  withCronLease,
} from '../../../src/index.ts'
import { TABLE_FACTS_SQL } from '../../../src/sql.ts'
import { SHAPE_READ } from '../../../src/table-facts.ts'

let pool: pg.Pool
let table: string
let job = 0
const nextJob = () => `outcome-${++job}`

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'outcome')
})
after(() => pool.end())

const lease = async (jobName: string, opts: { table?: string; overdueFactor?: number } = {}): Promise<LeaseInfo> => {
  const found = (await listLeases(pool, { table, ...opts })).find((l) => l.jobName === jobName)
  assert.ok(found, `a row for ${jobName}`)
  return found
}

/** A logger that keeps every warning. */
const warnings = () => {
  const seen: string[] = []
  return { seen, logger: { warn: (message: string) => void seen.push(message) } }
}

/** A table of the shape the original package created, which has none of the optional columns. */
async function originalTable(): Promise<string> {
  const name = `original_${randomBytes(4).toString('hex')}`
  await pool.query(`CREATE TABLE "${name}" (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL,
    holder TEXT, claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`)
  return name
}

/** Wraps the pool, counting the statements sent through it once the table's facts are read. */
const counting = (db: Queryable) => {
  const texts: string[] = []
  return {
    texts,
    query(text: string, params: unknown[]) {
      if (text !== TABLE_FACTS_SQL) texts.push(text)
      return db.query(text, params)
    },
  }
}

describe('a won tick records how it ended, fenced on its claim', () => {
  test('ok: when it finished (database clock), how long it ran, no error; it is the last success', async () => {
    const jobName = nextJob()
    await withCronLease(pool, jobName, 5000, () => sleep(120), { table })
    const row = await lease(jobName)
    assert.equal(row.lastOutcome, 'ok')
    assert.equal(row.lastError, null)
    assert.ok(row.lastDurationMs! >= 115 && row.lastDurationMs! < 2000, `duration ${row.lastDurationMs}`)
    const ranFor = Date.parse(row.lastFinishedAt!) - Date.parse(row.claimedAt)
    assert.ok(ranFor >= 115, `finished ${ranFor} ms after the claim, by the database clock`)
    assert.equal(row.lastSuccessAt, row.lastFinishedAt)
    assert.equal(row.held, true, 'recording never touches the lease')
  })

  test('error: name and first line only, at most 500 characters; the tick still rejects with it', async () => {
    const jobName = nextJob()
    const boom = new RangeError(`first line ${'x'.repeat(600)}\n    at secret (stack.js:1:1)`)
    await assert.rejects(
      withCronLease(pool, jobName, 5000, () => Promise.reject(boom), { table }),
      (e) => e === boom,
    )
    const row = await lease(jobName)
    assert.equal(row.lastOutcome, 'error')
    assert.equal(row.lastError!.length, 500)
    assert.match(row.lastError!, /^RangeError: first line x+…$/)
    assert.equal(row.lastSuccessAt, null, 'never succeeded')
    assert.equal(row.held, true, 'a failed tick keeps its lease')
    await expireLease(pool, table, jobName)
    await withCronLease(pool, jobName, 5000, () => {}, { table })
    const again = await lease(jobName)
    assert.deepEqual([again.lastOutcome, again.lastError], ['ok', null])
  })

  test('record: false writes nothing after the claim', async () => {
    const jobName = nextJob()
    const db = counting(pool)
    await withCronLease(db, jobName, 5000, () => {}, { table, record: false })
    assert.equal(db.texts.length, 2, 'the probe and the claim, and nothing after them')
    assert.match(db.texts[1]!, /^INSERT INTO /)
    assert.equal((await lease(jobName)).lastOutcome, null)
  })

  test('a tick whose lease was taken over records nothing over its successor', async () => {
    const jobName = nextJob()
    let letFirstFinish!: () => void
    const first = withCronLease(
      pool,
      jobName,
      5000,
      () =>
        new Promise<void>((resolve) => {
          letFirstFinish = resolve
        }),
      { table, holder: 'first' },
    )
    while (!letFirstFinish) await sleep(5)
    await expireLease(pool, table, jobName)
    await assert.rejects(
      withCronLease(pool, jobName, 5000, () => Promise.reject(new Error('successor failed')), { table }),
    )
    letFirstFinish()
    assert.equal((await first).ran, true)
    const row = await lease(jobName)
    assert.deepEqual([row.lastOutcome, row.lastError], ['error', 'Error: successor failed'])
  })

  test('leasedTick records too, and node-cron runs through leaseCoordinator record what node-cron reports', async () => {
    const viaTick = nextJob()
    await leasedTick(pool, viaTick, 5000, () => 'done', { table })()
    assert.equal((await lease(viaTick)).lastOutcome, 'ok')

    const coordinator = leaseCoordinator(pool, { table, leaseMs: 500 })
    const taskName = nextJob()
    let fires = 0
    const task = cron.schedule(
      '* * * * * *',
      () => {
        fires++
        throw new Error('task failed')
      },
      { name: taskName, distributed: true, runCoordinator: coordinator, logger: silent },
    )
    task.on('execution:failed', coordinator.onExecutionFailed)
    try {
      const deadline = Date.now() + 5000
      while ((await listLeases(pool, { table })).find((l) => l.jobName === taskName)?.lastOutcome !== 'error') {
        assert.ok(Date.now() < deadline, `recorded within 5 s (${fires} fires)`)
        await sleep(100)
      }
    } finally {
      await task.destroy()
    }
    assert.equal((await lease(taskName)).lastError, 'Error: task failed')
  })
})

// node-cron logs a failing task; the test expects it to fail.
const silent = { info() {}, warn() {}, error() {}, debug() {} }

describe('a table of the original shape keeps working', () => {
  test('no error reaches the caller, one warning per table naming migrate, no extra statement on a loss', async () => {
    const [oldA, oldB] = [await originalTable(), await originalTable()]
    const { seen, logger } = warnings()
    for (let i = 0; i < 3; i++) {
      for (const t of [oldA, oldB]) {
        assert.equal((await withCronLease(pool, 'job', 5000, () => 'ran', { table: t, logger })).ran, i === 0)
      }
    }
    assert.equal(seen.length, 2, seen.join('\n'))
    for (const [i, t] of [oldA, oldB].entries()) {
      assert.match(seen[i]!, new RegExp(`${t} has the original shape.*pg-cron-lease migrate --table ${t}`))
    }
    const db = counting(pool)
    assert.equal((await withCronLease(db, 'job', 5000, () => 'ran', { table: oldA, logger })).ran, false)
    assert.equal(db.texts.length, 1, 'a losing claim is one statement')
    assert.deepEqual((await listLeases(pool, { table: oldA }))[0]?.lastOutcome, null)
  })

  test('upgrading while replicas run: no error on the way, and recording starts once the shape is read again', async (t0) => {
    // The shape of a table that is not current is read again once a minute; a second here.
    SHAPE_READ.everyMs = 1000
    t0.after(() => {
      SHAPE_READ.everyMs = 60_000
    })
    const t = await originalTable()
    const errors: unknown[] = []
    let stop = false
    const replicas = Array.from({ length: 4 }, async (_, i) => {
      while (!stop) {
        await withCronLease(pool, 'busy', 30, () => sleep(5), {
          table: t,
          holder: `r${i}`,
          logger: { warn() {} },
        }).catch((e: unknown) => errors.push(e))
        await sleep(10)
      }
    })
    try {
      await sleep(300)
      await pool.query(upgradeTableSql(t))
      const deadline = Date.now() + 6000
      while ((await listLeases(pool, { table: t }))[0]?.lastOutcome !== 'ok') {
        assert.ok(Date.now() < deadline, 'recording started within 6 s of the upgrade (a read of the shape a second)')
        await sleep(50)
      }
    } finally {
      stop = true
      await Promise.all(replicas)
    }
    assert.deepEqual(errors, [])
  })
})

describe('overdue and interval', () => {
  test('the interval is observed between recorded runs; a job that stops being claimed becomes overdue within the factor', async () => {
    const jobName = nextJob()
    for (let i = 0; i < 3; i++) {
      await withCronLease(pool, jobName, 100, () => {}, { table })
      await sleep(300)
    }
    const row = await lease(jobName)
    assert.ok(row.everyMs! >= 280 && row.everyMs! < 1500, `observed every ${row.everyMs} ms`)
    // Claimed at most ~300 ms ago: within 2 × everyMs.
    assert.equal(row.overdue, false)
    const deadline = Date.now() + row.everyMs! * 2 + 1000
    while (!(await lease(jobName)).overdue) {
      assert.ok(Date.now() < deadline, 'overdue once 2 × everyMs has passed with no claim')
      await sleep(50)
    }
    const since = Date.parse((await lease(jobName)).checkedAt) - Date.parse(row.claimedAt)
    assert.ok(since > row.everyMs! * 2, `overdue only past the factor (${since} ms since the claim)`)
    assert.equal((await lease(jobName, { overdueFactor: 1000 })).overdue, false, 'a larger factor tolerates it')
  })

  test('a declared everyMs, or the interval forInterval declares, is recorded as the interval', async () => {
    const declared = nextJob()
    await withCronLease(pool, declared, 1000, () => {}, { table, everyMs: 90_000 })
    assert.equal((await lease(declared)).everyMs, 90_000)
    const derived = nextJob()
    await leasedTick(pool, derived, forInterval(7_777), () => {}, { table })()
    assert.equal((await lease(derived)).everyMs, 7_777)
    // leaseForInterval gives a lease only: another job of the same lease length inherits nothing.
    const raw = nextJob()
    await withCronLease(pool, raw, leaseForInterval(7_777), () => {}, { table })
    assert.equal((await lease(raw)).everyMs, null)
  })
})

describe('a replica whose clock is wrong says so', () => {
  test('a win publishes clockOffsetMs; past 10% of the lease, logger.warn once per job while it persists', async () => {
    const jobName = nextJob()
    const { seen, logger } = warnings()
    const offsets: (number | null)[] = []
    const onClaim = (message: unknown) => void offsets.push((message as ClaimMessage).clockOffsetMs)
    diagnostics.subscribe(CHANNELS.claim, onClaim)
    const claimOnce = async () => {
      await withCronLease(pool, jobName, 10_000, () => {}, { table, logger })
      await expireLease(pool, table, jobName)
    }
    try {
      await claimOnce()
      assert.equal(seen.length, 0, 'no warning for an accurate clock')
      const undo = installSkew(-5 * 60_000)
      try {
        await claimOnce()
        await claimOnce()
      } finally {
        undo()
      }
      assert.equal(seen.length, 1, 'one warning while the skew persists')
      assert.match(seen[0]!, /clock is (29|30)\d{4} ms behind the database's .* 'outcome-\d+'/)
      await claimOnce() // back in sync: the warning is re-armed
      const undoAgain = installSkew(60_000)
      try {
        await claimOnce()
      } finally {
        undoAgain()
      }
      assert.equal(seen.length, 2)
      assert.match(seen[1]!, /ahead of/)
    } finally {
      diagnostics.unsubscribe(CHANNELS.claim, onClaim)
    }
    const [accurate, behind] = offsets as number[]
    assert.ok(Math.abs(accurate!) < 1000, `accurate: ${accurate}`)
    assert.ok(Math.abs(behind! + 300_000) < 1000, `5 min behind: ${behind}`)
  })
})
