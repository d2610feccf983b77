/**
 * Occurrence keys, on the stand-in pool: which statement each call sends with which values, and
 * that every bad occurrence is a TypeError naming it before any query. What the statements do is
 * tested against Postgres (test/integration/occurrence*.test.ts).
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { describe, test } from 'node:test'
import { catchUp, forInterval, leaseCoordinator, leasedTick, withCronLease } from '../../src/index.ts'
import { type Call, isRecord, LOSS, standIn, TOKEN, WIN } from '../helpers/stand-in.ts'

const OCCURRENCE = '2026-12-01T09:00:00.000Z'
// Sent as ms since the epoch: the same number from every replica that names the slot.
const OCCURRENCE_MS = Date.parse(OCCURRENCE)
const NEXT = '2026-12-01T10:00:00.000Z'
// A fresh table name per test: what a process knows of a table's shape is kept per table.
const freshTable = () => `occ_${randomBytes(4).toString('hex')}`
const claims = (calls: Call[]) => calls.filter((c) => !isRecord(c))
const quiet = { warn() {}, debug() {} }

describe('a bad occurrence is a TypeError naming it, before any query', () => {
  test('withCronLease refuses impossible, zoneless, out-of-range and non-instant values', async () => {
    const cases: [string, unknown, RegExp][] = [
      ['occurrence', '2026-02-30T09:00:00Z', /opts\.occurrence must be/],
      ['occurrence', '2026-12-01T09:00:00', /opts\.occurrence must be .*with a zone/],
      ['occurrence', new Date(Number.NaN), /opts\.occurrence must be a valid Date/],
      ['occurrence', new Date(8.64e15), /opts\.occurrence must be between 1970/],
      ['occurrence', 1764579600000, /opts\.occurrence must be/],
      ['occurrence', new Proxy(new Date(), {}), /opts\.occurrence must be/],
      ['nextOccurrence', '10:00', /opts\.nextOccurrence must be/],
      ['nextOccurrence', {}, /opts\.nextOccurrence must be/],
    ]
    for (const [key, value, message] of cases) {
      const db = standIn()
      await assert.rejects(
        withCronLease(db, 'job', 1000, () => 1, { [key]: value }),
        (e: unknown) => e instanceof TypeError && message.test(e.message),
        `${key}: ${message}`,
      )
      assert.equal(db.calls.length, 0, 'no query for a bad occurrence')
    }
  })

  test('clockToleranceMs is a whole number of ms from 0 up', async () => {
    for (const bad of [-1, 1.5, '10', Number.NaN, 2 ** 31]) {
      const db = standIn()
      await assert.rejects(
        withCronLease(db, 'job', 1000, () => 1, { clockToleranceMs: bad as never }),
        /opts\.clockToleranceMs must be a whole number of milliseconds/,
      )
      assert.equal(db.calls.length, 0)
    }
  })

  test("a leasedTick call's occurrence given by hand is checked as the option is; the call resolves undefined", async () => {
    const db = standIn()
    const errors: unknown[] = []
    const tick = leasedTick(db, 'job', 1000, () => 1, { onError: (e) => void errors.push(e) })
    assert.equal(await tick({ occurrence: '2026-04-31T09:00:00Z' }), undefined)
    assert.equal(await tick({ occurrence: OCCURRENCE, nextOcurrence: NEXT } as never), undefined)
    assert.equal(db.calls.length, 0)
    assert.match(String(errors[0]), /TypeError: pg-cron-lease: at\.occurrence must be/)
    assert.match(String(errors[1]), /at\.nextOcurrence must be one of the known options/)
  })

  test('catchUp needs withinMs', async () => {
    const db = standIn()
    await assert.rejects(
      catchUp(db, 'job', 1000, () => 1, {} as never),
      /opts\.withinMs must be a finite number/,
    )
    await assert.rejects(
      catchUp(db, 'job', 1000, () => 1, { withinMs: 0 }),
      /opts\.withinMs must be at least 1 ms/,
    )
    assert.throws(
      () => leasedTick(db, 'job', 1000, () => 1, { catchUp: {} as never }),
      /opts\.catchUp\.withinMs must be/,
    )
    assert.throws(
      () => leaseCoordinator(db, { catchUp: { withinMs: 5, within: 1 } as never }),
      /opts\.catchUp\.within must be/,
    )
    assert.equal(db.calls.length, 0)
  })
})

describe('which claim each call sends', () => {
  test('a call that names nothing sends the lease-only claim, with the same three values as before', async () => {
    const db = standIn()
    await withCronLease(db, 'job', 1000, () => 1, { table: freshTable() })
    const [claim] = claims(db.calls)
    assert.deepEqual(claim!.params, ['job', 1000, `${(await import('node:os')).hostname()}:${process.pid}`])
    assert.doesNotMatch(claim!.text, /occurrence >=|\$4/)
  })

  test('a table of unknown shape gets the claim that reads keys through to_jsonb; a win that says the table is keyed keys itself, then claims keyed', async () => {
    const table = freshTable()
    const answers: unknown[] = [
      { rowCount: 1, rows: [{ claimed_at: TOKEN, recordable: true, keyed: true }] },
      { rowCount: 1, rows: [{ missed: '0' }] },
      { rowCount: 1, rows: [{ claimed_at: TOKEN, recordable: true, missed: '2' }] },
    ]
    const db = standIn((call) => (isRecord(call) ? WIN : answers.shift()))
    const seen: unknown[] = []
    const opts = { table, holder: 'h', logger: quiet, occurrence: new Date(OCCURRENCE), nextOccurrence: new Date(NEXT) }
    await withCronLease(db, 'job', 1000, (ctx) => void seen.push([ctx.occurrence?.toISOString(), ctx.missed]), opts)
    const [probing, keying] = claims(db.calls)
    assert.deepEqual(probing!.params, ['job', 1000, 'h', OCCURRENCE_MS, 100])
    assert.match(probing!.text, /to_jsonb\(existing\) ->> 'last_occurrence'/)
    assert.deepEqual(keying!.params.slice(0, 3), ['job', TOKEN, OCCURRENCE_MS])
    assert.match(keying!.text, /^UPDATE "occ_\w+" AS lease\nSET\n {2}last_occurrence/)
    await withCronLease(db, 'job', 1000, (ctx) => void seen.push([ctx.occurrence?.toISOString(), ctx.missed]), opts)
    const keyed = claims(db.calls)[2]!
    assert.match(
      keyed.text,
      /INSERT INTO "occ_\w+" AS lease \(job_name, lease_until, holder, claimed_at, last_occurrence/,
    )
    const [job, lease, holder, occurrence, nextDueMs, intervalMs, tolerance] = keyed.params as [
      string,
      number,
      string,
      string,
      number,
      number,
      number,
    ]
    assert.deepEqual(
      [job, lease, holder, occurrence, intervalMs, tolerance],
      ['job', 1000, 'h', OCCURRENCE_MS, 3_600_000, 100],
    )
    // The next occurrence travels as a duration from this replica's now.
    assert.ok(Math.abs(nextDueMs - (Date.parse(NEXT) - Date.now())) < 5_000, String(nextDueMs))
    assert.deepEqual(seen, [
      [OCCURRENCE, 0],
      [OCCURRENCE, 2],
    ])
  })

  test('a keyed win on the probing claim whose keying matches no row does not run: a keyed replica claimed it first', async () => {
    const answers: unknown[] = [{ rowCount: 1, rows: [{ claimed_at: TOKEN, recordable: true, keyed: true }] }, LOSS]
    const db = standIn(() => answers.shift() ?? WIN)
    const ran: boolean[] = []
    const outcome = await withCronLease(db, 'job', 1000, () => void ran.push(true), {
      table: freshTable(),
      occurrence: OCCURRENCE,
      logger: quiet,
    })
    assert.deepEqual([outcome, ran], [{ ran: false, result: null }, []])
  })

  test('the tolerance is clockToleranceMs, else 10% of the lease rounded down', async () => {
    for (const [opts, expected] of [
      [{}, 123],
      [{ clockToleranceMs: 0 }, 0],
      [{ clockToleranceMs: 5000 }, 5000],
    ] as const) {
      const db = standIn()
      await withCronLease(db, 'job', 1239, () => 1, {
        ...opts,
        table: freshTable(),
        occurrence: OCCURRENCE,
        logger: quiet,
      })
      assert.equal(claims(db.calls)[0]!.params[4], expected)
    }
  })

  test('a bag passed on every call with a new occurrence each time is checked once', async () => {
    let reads = 0
    const logger = {
      get debug() {
        reads++
        return undefined
      },
      warn() {},
    }
    const db = standIn()
    const opts: { table: string; logger: typeof logger; occurrence?: Date } = { table: freshTable(), logger }
    for (let i = 0; i < 5; i++) {
      opts.occurrence = new Date(Date.parse(OCCURRENCE) + i * 60_000)
      await withCronLease(db, 'job', 1000, () => 1, opts)
    }
    assert.equal(reads, 1, 'the logger was checked once')
    const sent = claims(db.calls).filter((c) => c.text.startsWith('INSERT'))
    assert.deepEqual(
      sent.map((c) => c.params[3]),
      [0, 1, 2, 3, 4].map((i) => OCCURRENCE_MS + i * 60_000),
    )
  })
})

describe('leasedTick reads the occurrence from what its scheduler passes', () => {
  const occurrenceSent = async (arg: unknown): Promise<unknown[]> => {
    const db = standIn()
    await leasedTick(db, 'job', 1000, () => 1, { table: freshTable(), logger: quiet })(arg)
    return claims(db.calls)[0]!.params
  }

  test("node-cron's context: ctx.date, and the task's next run", async () => {
    const params = await occurrenceSent({ date: new Date(OCCURRENCE), task: { getNextRun: () => new Date(NEXT) } })
    assert.equal(params[3], OCCURRENCE_MS)
  })

  test("croner's job: the scheduled slot of currentRun(), not when the run started", async () => {
    const started = new Date(Date.parse(OCCURRENCE) + 7)
    const job = {
      currentRun: () => started,
      // As croner's: the latest scheduled time before the reference.
      previousRuns: (n: number, from: Date) =>
        n === 1 && from.getTime() === started.getTime() + 1 ? [new Date(OCCURRENCE)] : [],
      nextRun: () => new Date(NEXT),
    }
    assert.equal((await occurrenceSent(job))[3], OCCURRENCE_MS)
  })

  test('a croner run started by hand, far from any slot, names no occurrence', async () => {
    const started = new Date(Date.parse(OCCURRENCE) + 5_000)
    const job = {
      currentRun: () => started,
      previousRuns: () => [new Date(OCCURRENCE)],
      nextRun: () => new Date(NEXT),
    }
    const params = await occurrenceSent(job)
    assert.equal(params.length, 3, 'the lease alone decides a run started by job.trigger()')
  })

  test('by hand, and nothing at all', async () => {
    assert.equal((await occurrenceSent({ occurrence: OCCURRENCE }))[3], OCCURRENCE_MS)
    assert.equal((await occurrenceSent(undefined)).length, 3)
    assert.equal((await occurrenceSent('a string a scheduler passed')).length, 3)
  })
})

describe("leasedTick's catch-up can be waited for", () => {
  test('tick.caughtUp resolves ran: false without catchUp, and the catch-up outcome with it', async () => {
    assert.deepEqual(await leasedTick(standIn(), 'job', 1000, () => 1).caughtUp, { ran: false, result: null })
    // A table whose columns the database does not list has no occurrence columns: nothing to catch up.
    const db = standIn(() => ({ rowCount: 1, rows: [{ exists: true, columns: ['job_name'] }] }))
    const tick = leasedTick(db, 'job', 1000, () => 1, {
      table: freshTable(),
      logger: quiet,
      catchUp: { withinMs: 1000 },
    })
    assert.deepEqual(await tick.caughtUp, { ran: false, result: null })
    const errors: unknown[] = []
    const failing = leasedTick(
      standIn(() => Promise.reject(new Error('down'))),
      'job',
      1000,
      () => 1,
      {
        table: freshTable(),
        catchUp: { withinMs: 1000 },
        onError: (e) => void errors.push(e),
      },
    )
    assert.equal(await failing.caughtUp, undefined)
    assert.match(String(errors[0]), /down/)
  })
})

describe('forInterval declares the lease and the interval together', () => {
  test('it is leaseForInterval with the interval beside it, frozen', () => {
    const lease = forInterval(15_000)
    assert.deepEqual(lease, { leaseMs: 12_000, everyMs: 15_000 })
    assert.ok(Object.isFrozen(lease))
    assert.throws(() => forInterval(0), /intervalMs must be a positive finite number/)
  })

  test('where a lease goes, it claims for its lease and declares its interval', async () => {
    const db = standIn()
    await leasedTick(db, 'job', forInterval(15_000), () => 1, { table: freshTable(), logger: quiet })()
    const [claim, record] = db.calls
    assert.deepEqual(claim!.params.slice(0, 2), ['job', 12_000])
    assert.ok(isRecord(record!))
    assert.equal(record!.params[5], 15_000, 'the interval is recorded as declared')
    for (const bad of [{ leaseMs: 1000 }, { leaseMs: '1', everyMs: 2 }, null, []]) {
      await assert.rejects(
        withCronLease(standIn(), 'job', bad as never, () => 1),
        /leaseMs must be/,
      )
    }
  })
})

describe('a lease that cannot work says so, once per job', () => {
  test('a lease not shorter than the declared interval warns, naming what is skipped and what to set', async () => {
    const warnings: string[] = []
    const logger = { warn: (m: string) => void warnings.push(m) }
    const table = freshTable()
    for (let i = 0; i < 3; i++)
      await withCronLease(
        standIn(() => LOSS),
        'fast',
        1500,
        () => 1,
        { table, logger, everyMs: 1000 },
      )
    assert.equal(warnings.length, 1, warnings.join('\n'))
    assert.match(warnings[0]!, /the 1500 ms lease of 'fast' is not shorter than the 1000 ms between its occurrences/)
    assert.match(warnings[0]!, /so that one is skipped; set a lease shorter than the gap \(forInterval\(1000\)/)
    await withCronLease(
      standIn(() => LOSS),
      'fine',
      800,
      () => 1,
      { table, logger, everyMs: 1000 },
    )
    assert.equal(warnings.length, 1)
  })

  test("a coordinator left on node-cron's 30 s default for a per-second task warns from the second fire", async () => {
    const warnings: string[] = []
    const coordinator = leaseCoordinator(
      standIn(() => LOSS),
      {
        table: freshTable(),
        logger: { warn: (m) => void warnings.push(m) },
      },
    )
    await coordinator.shouldRun('tick:2026-12-01T09:00:00.000Z', 30_000)
    assert.equal(warnings.length, 0)
    await coordinator.shouldRun('tick:2026-12-01T09:00:01.000Z', 30_000)
    assert.equal(warnings.length, 1)
    assert.match(warnings[0]!, /the 30000 ms lease of 'tick' is not shorter than the 1000 ms between its occurrences/)
  })
})
