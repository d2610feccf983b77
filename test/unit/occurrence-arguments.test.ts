/**
 * Occurrence keys, on the stand-in pool: which statement each call sends with which values, and
 * that every bad occurrence is a TypeError naming it before any query. What the statements do is
 * tested against Postgres (test/integration/occurrence*.test.ts).
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { describe, test } from 'node:test'
import { CronJob } from 'cron'
import { Cron } from 'croner'
import { catchUp, forInterval, leaseCoordinator, leasedTick, withCronLease } from '../../src/index.ts'
import { catchUpSql, claimSql, probeSql } from '../../src/sql.ts'
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

  test('clockToleranceMs is a number of ms from 0 up, after rounding', async () => {
    for (const bad of [-1, -0.6, '10', Number.NaN, 2 ** 31]) {
      const db = standIn()
      await assert.rejects(
        withCronLease(db, 'job', 1000, () => 1, { clockToleranceMs: bad as never }),
        /opts\.clockToleranceMs must be (a finite number of milliseconds|at least 0 ms|at most 2147483647 ms)/,
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
  test('a call that names nothing probes and claims with no occurrence: the lease decides alone', async () => {
    const db = standIn()
    const table = freshTable()
    await withCronLease(db, 'job', 1000, () => 1, { table })
    assert.deepEqual(db.probes, [{ text: probeSql(table), params: ['job', null] }])
    const [claim] = claims(db.calls)
    assert.equal(claim!.text, claimSql(table, 'history'))
    assert.deepEqual(claim!.params, ['job', 1000, `${hostname()}:${process.pid}`, null, 100, null, null, null, 100, 20])
  })

  test('on a table of the original shape, the original statement with the same three values as before', async () => {
    const db = standIn(undefined, 'original')
    const table = freshTable()
    await withCronLease(db, 'job', 1000, () => 1, { table, logger: quiet })
    assert.deepEqual(db.calls, [
      { text: claimSql(table, 'original'), params: ['job', 1000, `${hostname()}:${process.pid}`] },
    ])
    assert.deepEqual(db.probes, [], 'no probe: the original shape has one statement')
  })

  test('a named occurrence goes as ms, the next one as a duration and as itself, their gap as the interval; the win sets ctx.occurrence and ctx.missed', async () => {
    const table = freshTable()
    // As the claim returns it: the token and the count missed; the occurrence and interval are the call's.
    const db = standIn((call) => (isRecord(call) ? WIN : { rowCount: 1, rows: [{ claimed_at: TOKEN, missed: '2' }] }))
    const seen: unknown[] = []
    const opts = { table, holder: 'h', logger: quiet, occurrence: new Date(OCCURRENCE), nextOccurrence: new Date(NEXT) }
    const sentAt = Date.now()
    await withCronLease(db, 'job', 1000, (ctx) => void seen.push([ctx.occurrence?.toISOString(), ctx.missed]), opts)
    assert.deepEqual(db.probes, [{ text: probeSql(table), params: ['job', OCCURRENCE_MS] }])
    const [claim, record] = db.calls
    assert.equal(claim!.text, claimSql(table, 'history'))
    assert.equal(claim!.params.length, 10)
    const [job, lease, holder, occurrence, tolerance, nextInMs, next, intervalMs, keep, keepFailed] = claim!
      .params as number[]
    assert.deepEqual(
      [job, lease, holder, occurrence, tolerance, next, intervalMs, keep, keepFailed],
      ['job', 1000, 'h', OCCURRENCE_MS, 100, Date.parse(NEXT), 3_600_000, 100, 20],
    )
    // The next occurrence travels as a duration from this replica's now, which the database adds to its clock.
    assert.ok(Math.abs(nextInMs! - (Date.parse(NEXT) - sentAt)) < 5_000, String(nextInMs))
    assert.deepEqual(seen, [[OCCURRENCE, 2]])
    assert.ok(isRecord(record!))
    assert.equal(record!.params.length, 5, "the claim keeps the gap as the job's interval; the record ends the run")
  })

  test('on a table of the original shape an occurrence is not sent, with one warning per table: the lease alone, nothing recorded', async () => {
    const warnings: string[] = []
    const logger = { warn: (m: string) => void warnings.push(m) }
    const table = freshTable()
    // A token of this machine's time, so the one warning is the shape's, not a clock's.
    const now = () => ({ rowCount: 1, rows: [{ claimed_at: new Date().toISOString().replace('Z', '000Z') }] })
    const db = standIn(now, 'original')
    const seen: unknown[] = []
    for (let i = 0; i < 3; i++) {
      const occurrence = new Date(OCCURRENCE_MS + i * 60_000)
      await withCronLease(db, 'job', 1000, (ctx) => void seen.push(ctx.occurrence), { table, logger, occurrence })
    }
    assert.deepEqual(
      db.calls.map((c) => [c.text, c.params.length]),
      Array.from({ length: 3 }, () => [claimSql(table, 'original'), 3]),
      'three claims of the original statement, and no outcome record',
    )
    assert.deepEqual(
      seen.map((at) => (at as Date | null)?.getTime()),
      [0, 1, 2].map((i) => OCCURRENCE_MS + i * 60_000),
      'ctx.occurrence is still the occurrence named',
    )
    assert.equal(warnings.length, 1, warnings.join('\n'))
    assert.match(warnings[0]!, new RegExp(`^pg-cron-lease: ${table} `))
    assert.match(warnings[0]!, /claims are decided by the lease alone .*outcomes are not recorded/)
    assert.match(warnings[0]!, new RegExp(`run \`pg-cron-lease migrate --table ${table}\``))
  })

  test('a missing table gets the original statement, whose refusal names the table', async () => {
    const table = freshTable()
    const db = standIn(
      () => Promise.reject(Object.assign(new Error(`relation "${table}" does not exist`), { code: '42P01' })),
      'missing',
    )
    await assert.rejects(
      withCronLease(db, 'job', 1000, () => 1, { table, occurrence: OCCURRENCE }),
      (e: unknown) =>
        (e as { code?: string }).code === '42P01' &&
        (e as Error).message.startsWith(`pg-cron-lease: the lease table ${table} does not exist`),
    )
    assert.deepEqual(
      db.calls.map((c) => c.text),
      [claimSql(table, 'original')],
    )
    assert.deepEqual(db.probes, [], 'a table not known to exist is not probed')
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

  test('a bag passed on every call with a new occurrence each time is read anew: each claim sends its own', async () => {
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
    assert.equal(reads, 5, 'the bag is read on every call')
    const sent = claims(db.calls).filter((c) => c.text === claimSql(opts.table, 'history'))
    assert.deepEqual(
      sent.map((c) => c.params[3]),
      [0, 1, 2, 3, 4].map((i) => OCCURRENCE_MS + i * 60_000),
    )
  })
})

describe('a win or a dead heat leaves the probe out of the next three claims through that handle on that table', () => {
  // A handle whose claim answers `reply` as set, noting how many probes each claim found sent before it.
  const replying = (held?: (probe: Call) => boolean) => {
    const state = { reply: WIN as unknown, probesBefore: [] as number[] }
    const db = standIn(
      () => {
        state.probesBefore.push(db.probes.length)
        return state.reply
      },
      'current',
      held,
    )
    return { db, state }
  }
  const run = (db: ReturnType<typeof standIn>, table: string) =>
    withCronLease(db, 'job', 1000, () => 1, { table, record: false, logger: quiet })

  test('probe and claim; after the win the claim alone, until three claims without it lost; then the probe again', async () => {
    const { db, state } = replying()
    const table = freshTable()
    assert.equal((await run(db, table)).ran, true)
    assert.deepEqual(db.probes, [{ text: probeSql(table), params: ['job', null] }])
    assert.deepEqual(state.probesBefore, [1], 'the probe went before the claim')
    assert.equal((await run(db, table)).ran, true)
    assert.equal(db.probes.length, 1, 'no probe after a win')
    state.reply = LOSS
    for (let i = 0; i < 3; i++) assert.equal((await run(db, table)).ran, false)
    assert.equal(db.probes.length, 1, 'none for the three losses after the win')
    state.reply = WIN
    assert.equal((await run(db, table)).ran, true)
    assert.equal(db.probes.length, 2, 'three losses brought the probe back')
    assert.deepEqual(state.probesBefore, [1, 1, 1, 1, 1, 2])
    await run(db, table)
    assert.equal(db.probes.length, 2, 'and that win left it out again')
    assert.deepEqual(
      db.calls.map((c) => [c.text, c.params.length]),
      Array.from({ length: 7 }, () => [claimSql(table, 'lease'), 8]),
      'every call sent the claim itself, with or without the probe before it',
    )
  })

  test('a win between losses without the probe starts the three again', async () => {
    const { db, state } = replying()
    const table = freshTable()
    await run(db, table)
    const replies = [LOSS, LOSS, WIN, LOSS, LOSS, LOSS]
    for (const reply of replies) {
      state.reply = reply
      await run(db, table)
    }
    assert.equal(db.probes.length, 1, 'the win after two losses kept the probe out for three more')
    await run(db, table)
    assert.equal(db.probes.length, 2, 'three losses in a row brought it back')
  })

  test('a dead heat (the probe found the lease free, the claim lost) leaves it out too', async () => {
    const { db, state } = replying(() => false)
    const table = freshTable()
    state.reply = LOSS
    assert.equal((await run(db, table)).ran, false)
    assert.equal(db.probes.length, 1)
    for (let i = 0; i < 3; i++) assert.equal((await run(db, table)).ran, false)
    assert.equal(db.probes.length, 1, 'the next three claims went without it')
    assert.equal(db.calls.length, 4, 'each sent the claim')
    await run(db, table)
    assert.equal(db.probes.length, 2, 'then the probe again')
  })

  test('a burst of calls at once after a win: three go without the probe, the others send it', async () => {
    const { db } = replying()
    const table = freshTable()
    await run(db, table)
    await Promise.all(Array.from({ length: 5 }, () => run(db, table)))
    assert.equal(db.probes.length, 1 + 2, 'the three are counted as they are sent, not as they come back')
  })

  test('a failed claim brings the probe back (a handle on a standby still loses quietly to a held lease)', async () => {
    let refuse = false
    const db = standIn(() => {
      if (refuse) throw Object.assign(new Error('cannot execute INSERT in a read-only transaction'), { code: '25006' })
      return WIN
    })
    const table = freshTable()
    await run(db, table)
    refuse = true
    await assert.rejects(run(db, table), /read-only transaction/)
    assert.equal(db.probes.length, 1, 'the claim after the win went alone')
    refuse = false
    await run(db, table)
    assert.equal(db.probes.length, 2, 'the claim after the failure sent the probe first')
  })

  test('a loss stopped at the probe keeps probing, and sends no claim', async () => {
    let held = true
    const { db } = replying(() => held)
    const table = freshTable()
    for (let i = 0; i < 3; i++) assert.equal((await run(db, table)).ran, false)
    assert.equal(db.probes.length, 3, 'each claim probed: a loss at the probe is no win to skip it after')
    assert.deepEqual(db.calls, [], 'nothing was sent past a probe that found the lease held')
    held = false
    assert.equal((await run(db, table)).ran, true)
    assert.equal(db.probes.length, 4)
    assert.equal(db.calls.length, 1)
  })

  test('per table and per handle: a win on one table skips the probe on that table only, through that handle only', async () => {
    const { db } = replying()
    const [a, b] = [freshTable(), freshTable()]
    await run(db, a)
    await run(db, b)
    assert.deepEqual(
      db.probes.map((c) => c.text),
      [probeSql(a), probeSql(b)],
      'the win on a did not skip the probe on b',
    )
    await run(db, a)
    await run(db, b)
    assert.equal(db.probes.length, 2, 'each table had a win of its own through this handle')
    const other = replying().db
    await run(other, a)
    assert.deepEqual(
      other.probes.map((c) => c.text),
      [probeSql(a)],
      'another handle has won nothing on a',
    )
  })
})

describe('leasedTick reads the occurrence from what its scheduler passes', () => {
  const occurrenceSent = async (arg: unknown): Promise<unknown[]> => {
    const db = standIn()
    await leasedTick(db, 'job', 1000, () => 1, { table: freshTable(), logger: quiet })(arg)
    const { params } = claims(db.calls)[0]!
    // The probe is keyed on the occurrence the claim is, or the loser it stops would be the wrong one.
    assert.deepEqual(
      db.probes.map((probe) => probe.params),
      [['job', params[3]]],
    )
    return params
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

  test('a croner run late by more than a second names its slot, and one late by more than an interval the latest slot', async () => {
    // A real croner job, its slots every 5 min; only when the run started is made up.
    const started = (ms: number) => {
      const job = new Cron('0 */5 * * * *', { paused: true, timezone: 'UTC' })
      job.currentRun = () => new Date(ms)
      return job
    }
    try {
      assert.equal((await occurrenceSent(started(OCCURRENCE_MS + 1_500)))[3], OCCURRENCE_MS, '1.5 s late')
      assert.equal((await occurrenceSent(started(OCCURRENCE_MS + 4 * 60_000)))[3], OCCURRENCE_MS, '4 min late')
      assert.equal(
        (await occurrenceSent(started(OCCURRENCE_MS + 7 * 60_000)))[3],
        OCCURRENCE_MS + 5 * 60_000,
        '7 min late: the latest slot at or before the run, never the one it was late for',
      )
      assert.equal((await occurrenceSent(started(OCCURRENCE_MS)))[3], OCCURRENCE_MS, 'on time')
    } finally {
      Cron.prototype.stop.call(started(0))
    }
  })

  test('a croner run started by hand (job.trigger()) names the latest slot: it runs only if no replica ran that slot', async () => {
    const db = standIn()
    let startedAt: Date | null = null
    const run = leasedTick(db, 'job', 1000, () => 1, { table: freshTable(), logger: quiet })
    const job = new Cron('0 0 * * * *', { paused: true, timezone: 'UTC' }, async (self: Cron) => {
      startedAt = self.currentRun()
      await run(self)
    })
    try {
      await job.trigger()
    } finally {
      job.stop()
    }
    assert.ok(startedAt !== null, 'croner set currentRun() for the triggered run')
    const hour = 3_600_000
    const latest = Math.floor((startedAt as Date).getTime() / hour) * hour
    const params = claims(db.calls)[0]!.params
    assert.equal(params[3], latest, 'the latest hourly slot at or before the trigger')
    assert.equal(params[6], latest + hour, 'and the next one')
  })

  test("a CronJob of the cron package names the latest slot at or before its lastDate(), in the job's zone", async () => {
    // 01:30 every day in New York: 06:30 UTC in winter. A UTC reading of the pattern would name 01:30 UTC.
    const db = standIn()
    const run = leasedTick(db, 'job', 1000, () => 1, { table: freshTable(), logger: quiet })
    let pending: Promise<unknown> = Promise.resolve()
    // As the docs wire it: `function () { tick(this) }`, the job as `this`.
    const job = new CronJob(
      '0 30 1 * * *',
      function (this: CronJob) {
        pending = run(this)
      },
      null,
      false,
      'America/New_York',
    )
    const fire = async (at: string) => {
      job.lastExecution = new Date(at)
      await job.fireOnTick()
      await pending
    }
    await fire('2026-12-01T06:30:02.250Z')
    const params = claims(db.calls)[0]!.params
    assert.equal(params[3], Date.parse('2026-12-01T06:30:00.000Z'))
    assert.equal(params[6], job.nextDate().toMillis(), "the next occurrence is the job's nextDate()")
    // Late by more than a day: the latest slot, not the one before it.
    await fire('2026-12-03T07:00:00.000Z')
    assert.equal(claims(db.calls)[1]!.params[3], Date.parse('2026-12-03T06:30:00.000Z'))
  })

  test('a CronJob that has not fired yet names no occurrence, only its next one', async () => {
    const job = new CronJob('0 0 9 * * *', () => {}, null, false, 'UTC')
    const params = await occurrenceSent(job)
    assert.equal(params[3], null)
    assert.equal(params[6], job.nextDate().toMillis())
  })

  test('by hand, and nothing at all', async () => {
    assert.equal((await occurrenceSent({ occurrence: OCCURRENCE }))[3], OCCURRENCE_MS)
    for (const nothing of [undefined, 'a string a scheduler passed', 42, new Proxy({ occurrence: OCCURRENCE }, {})]) {
      assert.deepEqual(
        (await occurrenceSent(nothing)).slice(3),
        [null, 100, null, null, null, 100, 20],
        String(nothing),
      )
    }
  })
})

describe("leasedTick's catch-up can be waited for", () => {
  test('tick.caughtUp resolves ran: false without catchUp, and the catch-up outcome with it', async () => {
    assert.deepEqual(await leasedTick(standIn(), 'job', 1000, () => 1).caughtUp, { ran: false, result: null })
    // A table of the original shape stores no due time: nothing to catch up, and nothing is sent.
    const db = standIn(undefined, 'original')
    const tick = leasedTick(db, 'job', 1000, () => 1, {
      table: freshTable(),
      logger: quiet,
      catchUp: { withinMs: 1000 },
    })
    assert.deepEqual(await tick.caughtUp, { ran: false, result: null })
    assert.equal(db.calls.length, 0)
    // On the current shape the catch-up is a statement of its own, its window in $4, with no probe first.
    const table = freshTable()
    const current = standIn()
    const caught = leasedTick(current, 'job', 1000, () => 7, {
      table,
      logger: quiet,
      everyMs: 60_000,
      catchUp: { withinMs: 5000 },
    })
    assert.deepEqual(await caught.caughtUp, { ran: true, result: 7 })
    const [claim] = claims(current.calls)
    assert.equal(claim!.text, catchUpSql(table, 'history'))
    assert.deepEqual(claim!.params, ['job', 1000, `${hostname()}:${process.pid}`, 5000, null, null, 60_000, 100, 20])
    assert.deepEqual(current.probes, [])
    // Only a catch-up's reply names its occurrence and an interval (the table's, none being declared):
    // the run takes both from it.
    const observed = standIn((call) =>
      isRecord(call)
        ? WIN
        : {
            rowCount: 1,
            rows: [{ claimed_at: TOKEN, missed: '3', occurrence: '2026-12-01T09:00:00.000000Z', interval_ms: 90_000 }],
          },
    )
    const seen: unknown[] = []
    const replied = leasedTick(observed, 'job', 1000, (ctx) => seen.push([ctx.occurrence?.toISOString(), ctx.missed]), {
      table: freshTable(),
      logger: quiet,
      catchUp: { withinMs: 5000 },
    })
    assert.deepEqual(await replied.caughtUp, { ran: true, result: 1 })
    assert.deepEqual(seen, [[OCCURRENCE, 3]])
    const [, record] = observed.calls
    assert.ok(isRecord(record!))
    assert.equal(record!.params.length, 5, 'the catch-up itself keeps the interval in the row; the record ends the run')
    const lost = standIn(() => LOSS)
    const none = leasedTick(lost, 'job', 1000, () => 1, { table, logger: quiet, catchUp: { withinMs: 5000 } })
    assert.deepEqual(await none.caughtUp, { ran: false, result: null }, 'no row back: nothing was due')
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
    assert.equal(claim!.params[7], 15_000, 'the interval is declared with the claim')
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

describe('a logger that throws while warning before the claim', () => {
  test('withCronLease never throws, and still claims: the warning goes to the console instead', async (t) => {
    const db = standIn()
    const failure = new Error('the logger is down')
    const logger = {
      warn: () => {
        throw failure
      },
    }
    const warned: string[] = []
    t.mock.method(console, 'warn', (message: string) => void warned.push(message))
    t.mock.method(console, 'error', () => {})
    let call: Promise<unknown> | undefined
    assert.doesNotThrow(() => {
      call = withCronLease(db, 'gap', 5_000, () => 'ran', {
        table: freshTable(),
        logger,
        occurrence: OCCURRENCE,
        nextOccurrence: '2026-12-01T09:00:01.000Z',
      })
    })
    await call
    assert.match(warned[0] ?? '', /the 5000 ms lease of 'gap' is not shorter than the 1000 ms/)
    assert.notDeepEqual(db.calls, [], 'the claim was sent')
  })
})
