import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { LEASE, leaseCoordinator, leasedTick, leaseForInterval, MAX_LEASE_MS } from '../../src/index.ts'
import { claimSql, probeSql } from '../../src/sql.ts'
import { isRecord, LOSS, standIn, WIN } from '../helpers/stand-in.ts'

const tick = () => 'ran'
const SLOT = '2026-11-29T22:12:11.000Z'

/** Proves that making the wrapper throws a TypeError matching `message`, synchronously and before any query. */
function throwsAtCreation(make: (db: ReturnType<typeof standIn>) => unknown, message: RegExp) {
  const db = standIn()
  assert.throws(
    () => make(db),
    (error: unknown) => error instanceof TypeError && message.test(error.message),
  )
  assert.equal(db.calls.length, 0, 'no query may be made for a bad argument')
}

describe('leasedTick validates every argument when the wrapper is made', () => {
  test('db, jobName, leaseMs and runTick are checked synchronously, naming the argument', () => {
    throwsAtCreation(() => leasedTick({} as never, 'job', 1000, tick), /db must be .*query.*got \{\}/)
    for (const bad of ['', 5, null, 'a\0b']) {
      throwsAtCreation((db) => leasedTick(db, bad as never, 1000, tick), /jobName must be/)
    }
    for (const bad of [0, -1, Number.NaN, Infinity, '1000', MAX_LEASE_MS + 1]) {
      throwsAtCreation((db) => leasedTick(db, 'job', bad as never, tick), /leaseMs must be/)
    }
    for (const bad of [undefined, 'tick', {}]) {
      throwsAtCreation((db) => leasedTick(db, 'job', 1000, bad as never), /runTick must be a function/)
    }
  })

  test('options are checked with the same rules as withCronLease, plus onError', () => {
    const cases: [unknown, RegExp][] = [
      ['x', /opts must be an object/],
      [
        { tabel: 'x' },
        /opts\.tabel must be one of the known options \(holder, table, logger, keepAlive, prepare, record, history, everyMs, clockToleranceMs, catchUp, onError\)/,
      ],
      [{ holder: 5 }, /opts\.holder must be/],
      [{ table: 'x; DROP TABLE y' }, /opts\.table must be/],
      [{ logger: { error: 'no' } }, /opts\.logger\.error must be a function/],
      [{ keepAlive: { beatMs: 500, extendMs: 2000 } }, /opts\.keepAlive\.extendMs must be at most 1000/],
      [{ onError: 'console' }, /opts\.onError must be a function, got "console"/],
      [{ onError: null }, /opts\.onError must be a function/],
    ]
    for (const [opts, message] of cases)
      throwsAtCreation((db) => leasedTick(db, 'job', 1000, tick, opts as never), message)
  })

  test('valid arguments make no query until the wrapper is called, then one probe and exactly one claim', async () => {
    const db = standIn()
    const run = leasedTick(db, 'job', 1000.4, tick, { holder: 'h', table: 'a.b' })
    assert.deepEqual([db.facts.length, db.probes.length, db.calls.length], [0, 0, 0])
    assert.deepEqual(await run(), { ran: true, result: 'ran' })
    assert.deepEqual(db.probes, [{ text: probeSql('a.b'), params: ['job', null] }])
    assert.equal(db.calls.length, 2)
    assert.ok(isRecord(db.calls[1]!))
    assert.equal(db.calls[0]!.text, claimSql('a.b', 'history'))
    assert.deepEqual(db.calls[0]!.params, ['job', 1000, 'h', null, 100, null, null, null, 100, 20])
    assert.equal(db.facts.length, 1, "the table's facts were read once, at the first call")
  })

  test('holder, table, logger and keepAlive reach withCronLease', async () => {
    const lines: string[] = []
    const lost = leasedTick(
      standIn(() => LOSS),
      'job',
      1000,
      tick,
      { logger: { debug: (m) => void lines.push(m) } },
    )
    assert.deepEqual(await lost(), { ran: false, result: null })
    assert.deepEqual(lines, ["pg-cron-lease: 'job' skipped: lease held by another replica"])

    const db = standIn()
    const slow = leasedTick(db, 'job', 1000, () => new Promise((resolve) => setTimeout(resolve, 120)), {
      keepAlive: { beatMs: 20, extendMs: 500 },
    })
    await slow()
    assert.ok(
      db.calls.slice(1).some((c) => /GREATEST/.test(c.text) && c.params[1] === 500 && c.params[3] === true),
      'a keep-alive beat ran',
    )
  })

  test('scheduler arguments passed to the wrapper never reach the tick', async () => {
    let seen: unknown
    const run = leasedTick(standIn(), 'job', 1000, (ctx) => {
      seen = ctx
    }) as (...args: unknown[]) => Promise<unknown>
    await run({ date: new Date() }, 'croner job')
    assert.equal((seen as { jobName: string }).jobName, 'job')
  })
})

describe('leasedTick never rejects: errors go to onError', () => {
  test('a claim error reaches onError with the job name, the tick does not run, and the call resolves undefined', async () => {
    const failure = new Error('connection refused')
    const errors: [unknown, string][] = []
    let ran = false
    const run = leasedTick(
      standIn(() => Promise.reject(failure)),
      'job',
      1000,
      () => {
        ran = true
      },
      { onError: (err, job) => void errors.push([err, job]) },
    )
    assert.equal(await run(), undefined)
    assert.deepEqual(errors, [[failure, 'job']])
    assert.equal(ran, false)
  })

  test('a tick that throws reaches onError, and the call resolves undefined', async () => {
    const failure = new Error('tick failed')
    const errors: unknown[] = []
    const run = leasedTick(
      standIn(),
      'job',
      1000,
      () => {
        throw failure
      },
      { onError: (err) => void errors.push(err) },
    )
    assert.equal(await run(), undefined)
    assert.deepEqual(errors, [failure])
  })

  test('an unreadable driver result is an error, never a win', async () => {
    const errors: unknown[] = []
    let ran = false
    const run = leasedTick(
      standIn(() => ({ ok: true })),
      'job',
      1000,
      () => {
        ran = true
      },
      { onError: (err) => void errors.push(err) },
    )
    assert.equal(await run(), undefined)
    assert.equal(ran, false)
    assert.match(String(errors[0]), /cannot tell whether the lease for 'job' was claimed/)
  })

  test('a lost claim resolves { ran: false } and calls no onError', async () => {
    const run = leasedTick(
      standIn(() => LOSS),
      'job',
      1000,
      tick,
      {
        onError: () => assert.fail('onError must not be called for a lost claim'),
      },
    )
    assert.deepEqual(await run(), { ran: false, result: null })
  })

  test('without onError, logger.error is the default: called with the error and the job name', async () => {
    const failure = new Error('boom')
    const logged: unknown[][] = []
    const run = leasedTick(
      standIn(() => Promise.reject(failure)),
      'job',
      1000,
      tick,
      { logger: { error: (...args: unknown[]) => void logged.push(args) } },
    )
    assert.equal(await run(), undefined)
    assert.deepEqual(logged, [[failure, 'job']])
  })

  test('without onError or logger.error, the error goes to console.error as one line: the job, the name and the message', async (t) => {
    const failure = new Error('boom')
    const logged = t.mock.method(console, 'error', () => {})
    const run = leasedTick(
      standIn(() => Promise.reject(failure)),
      'job',
      1000,
      tick,
      { logger: { debug: () => {} } },
    )
    assert.equal(await run(), undefined)
    assert.deepEqual(
      logged.mock.calls.map((call) => call.arguments),
      [["pg-cron-lease: 'job' tick failed: Error: boom"]],
    )
  })

  test('an onError that throws or rejects still leaves the call resolved; both errors reach console.error', async (t) => {
    const logged = t.mock.method(console, 'error', () => {})
    const failure = new Error('boom')
    for (const onError of [
      () => {
        throw new Error('onError threw')
      },
      () => Promise.reject(new Error('onError rejected')),
    ]) {
      const run = leasedTick(
        standIn(() => Promise.reject(failure)),
        'job',
        1000,
        tick,
        { onError },
      )
      assert.equal(await run(), undefined)
    }
    assert.equal(logged.mock.callCount(), 2)
    assert.match(String(logged.mock.calls[0]?.arguments[1]), /onError threw/)
    assert.match(String(logged.mock.calls[1]?.arguments[1]), /onError rejected/)
    assert.equal(logged.mock.calls[1]?.arguments[2], failure)
  })
})

describe('leaseCoordinator validates its options when it is made', () => {
  test('db and every option are checked synchronously, before any query', () => {
    throwsAtCreation(() => leaseCoordinator(null as never), /db must be/)
    const cases: [unknown, RegExp][] = [
      ['x', /opts must be an object/],
      [
        { lease: 1000 },
        /opts\.lease must be one of the known options \(holder, table, logger, prepare, record, history, clockToleranceMs, catchUp, leaseMs\)/,
      ],
      [{ leaseMs: 0 }, /opts\.leaseMs must be at least 1 ms/],
      [{ leaseMs: '800' }, /opts\.leaseMs must be a number of milliseconds or a function of the task name/],
      [{ leaseMs: Number.NaN }, /opts\.leaseMs must be a finite number/],
      [{ leaseMs: MAX_LEASE_MS + 1 }, /opts\.leaseMs must be at most/],
      [{ table: 'a.b.c' }, /opts\.table must be/],
      [{ holder: 7 }, /opts\.holder must be/],
      [{ logger: 'console' }, /opts\.logger must be/],
    ]
    for (const [opts, message] of cases) throwsAtCreation((db) => leaseCoordinator(db, opts as never), message)
  })
})

describe('leaseCoordinator claims on the task name, with the same claim as withCronLease', () => {
  test('only the trailing ISO-8601 slot is stripped, so a task name may contain colons', async () => {
    const db = standIn()
    const coordinator = leaseCoordinator(db, { holder: 'h', table: 'jobs.leases' })
    assert.equal(await coordinator.shouldRun(`billing:eu:2026-11-29T00:00:00.000Z:${SLOT}`, 800), true)
    assert.equal(await coordinator.shouldRun(`report:${SLOT}`, 800), true)
    // The slot is the occurrence the claim is keyed on.
    assert.deepEqual(
      db.calls.map((c) => c.params.slice(0, 4)),
      [
        ['billing:eu:2026-11-29T00:00:00.000Z', 800, 'h', Date.parse(SLOT)],
        ['report', 800, 'h', Date.parse(SLOT)],
      ],
    )
    assert.equal(db.calls[0]!.text, claimSql('jobs.leases', 'history'))
  })

  test('replicas whose clocks disagree claim the same row', async () => {
    const db = standIn()
    const coordinator = leaseCoordinator(db)
    await coordinator.shouldRun('report:2026-11-29T22:12:11.000Z', 800)
    await coordinator.shouldRun('report:2026-11-30T01:12:11.000Z', 800)
    assert.deepEqual(
      db.calls.map((c) => c.params[0]),
      ['report', 'report'],
    )
  })

  test('resolves true for the winner only', async () => {
    assert.equal(await leaseCoordinator(standIn(() => WIN)).shouldRun(`a:${SLOT}`, 800), true)
    assert.equal(await leaseCoordinator(standIn(() => LOSS)).shouldRun(`a:${SLOT}`, 800), false)
  })

  test('the lease is opts.leaseMs, else a function of the task name, else ttlMs (rounded)', async () => {
    const db = standIn()
    await leaseCoordinator(db, { leaseMs: 1200 }).shouldRun(`a:${SLOT}`, 30_000)
    await leaseCoordinator(db, { leaseMs: (name) => (name === 'a' ? 700 : 900) }).shouldRun(`a:${SLOT}`, 30_000)
    await leaseCoordinator(db, { leaseMs: (name) => (name === 'a' ? 700 : 900) }).shouldRun(`b:${SLOT}`, 30_000)
    await leaseCoordinator(db).shouldRun(`a:${SLOT}`, 799.6)
    assert.deepEqual(
      db.calls.map((c) => c.params[1]),
      [1200, 700, 900, 800],
    )
  })

  test('a key without a slot, an empty task name, or a bad ttlMs rejects before any query (node-cron skips the fire)', async () => {
    const cases: [() => unknown, RegExp][] = [
      [
        () => leaseCoordinator(db).shouldRun('report', 800),
        /key must be node-cron's 'name:slot' key, the slot as Date#toISOString\(\) writes a real instant from 1970 to 9999, got "report"/,
      ],
      [() => leaseCoordinator(db).shouldRun(`report:${SLOT}x`, 800), /key must be/],
      [() => leaseCoordinator(db).shouldRun(42 as never, 800), /key must be .*got 42/],
      [() => leaseCoordinator(db).shouldRun(`:${SLOT}`, 800), /the task name in key must be a non-empty string/],
      [() => leaseCoordinator(db).shouldRun(`a:${SLOT}`, 0), /ttlMs \(distributedLease\) must be at least 1 ms/],
      [() => leaseCoordinator(db).shouldRun(`a:${SLOT}`, Number.NaN), /ttlMs \(distributedLease\) must be a finite/],
      [() => leaseCoordinator(db, { leaseMs: () => -1 }).shouldRun(`a:${SLOT}`, 800), /opts\.leaseMs\('a'\) must be/],
    ]
    const db = standIn()
    for (const [call, message] of cases) {
      await assert.rejects(
        async () => call(),
        (error: unknown) => error instanceof TypeError && message.test(error.message),
      )
    }
    assert.equal(db.calls.length, 0)
  })

  test('a slot that is not exactly what toISOString() writes for a real instant in 1970..9999 is refused before any query', async () => {
    const db = standIn()
    const coordinator = leaseCoordinator(db)
    for (const slot of [
      '2026-02-30T09:00:00.000Z', // February 30th
      '2026-13-01T09:00:00.000Z', // month 13
      '2026-04-31T09:00:00.000Z', // April 31st
      '2026-11-29T24:00:00.000Z', // hour 24, which Date.parse reads as the next day
      '2026-11-29T22:12:60.000Z', // second 60
      '+002026-11-29T22:12:11.000Z', // a signed year
      '-000001-01-01T00:00:00.000Z',
      '1969-12-31T23:59:59.999Z', // before 1970
      '2026-11-29T22:12:11Z', // no milliseconds
      '2026-11-29T22:12:11.000+00:00', // not UTC as toISOString writes it
      '2026-11-29 22:12:11.000Z',
    ]) {
      await assert.rejects(
        coordinator.shouldRun(`report:${slot}`, 800),
        (error: unknown) =>
          error instanceof TypeError &&
          error.message.startsWith("pg-cron-lease: key must be node-cron's 'name:slot' key") &&
          error.message.endsWith(`got ${JSON.stringify(`report:${slot}`)}`),
        slot,
      )
    }
    assert.equal(db.calls.length, 0)
    assert.equal(db.facts.length, 0, 'not even the facts read')
    // The bounds themselves are real instants.
    assert.equal(await coordinator.shouldRun('first:1970-01-01T00:00:00.000Z', 800), true)
    assert.equal(await coordinator.shouldRun('last:9999-12-31T23:59:59.999Z', 800), true)
    assert.deepEqual(
      db.calls.map((c) => c.params[3]),
      [0, Date.UTC(9999, 11, 31, 23, 59, 59, 999)],
    )
  })

  test('a claim error rejects unchanged, so node-cron fails closed', async () => {
    const failure = new Error('connection refused')
    await assert.rejects(leaseCoordinator(standIn(() => Promise.reject(failure))).shouldRun(`a:${SLOT}`, 800), failure)
  })

  test('onComplete holds the lease: its one statement records the run, with no outcome unless told', async () => {
    const db = standIn()
    const coordinator = leaseCoordinator(db)
    await coordinator.shouldRun(`a:${SLOT}`, 800)
    await coordinator.onComplete(`a:${SLOT}`)
    assert.equal(db.calls.length, 2)
    assert.equal(db.calls[0]!.text, claimSql('cron_leases', 'history'))
    assert.ok(isRecord(db.calls[1]!))
    assert.deepEqual(db.calls[1]!.params.slice(3), [null, null])
    await coordinator.onComplete(`a:${SLOT}`)
    assert.equal(db.calls.length, 2, 'a second onComplete for the same key records nothing')
  })

  test("a failure reported through onExecutionFailed is recorded as the run's error", async () => {
    const db = standIn()
    const coordinator = leaseCoordinator(db)
    await coordinator.shouldRun(`a:${SLOT}`, 800)
    coordinator.onExecutionFailed({ task: { name: 'a' }, execution: { error: new RangeError('bad\nsecond line') } })
    await coordinator.onComplete(`a:${SLOT}`)
    assert.deepEqual(db.calls[1]!.params.slice(3), ['error', 'RangeError: bad'])
  })

  test('record: false sends nothing after the claim', async () => {
    const db = standIn()
    const coordinator = leaseCoordinator(db, { record: false })
    await coordinator.shouldRun(`a:${SLOT}`, 800)
    await coordinator.onComplete(`a:${SLOT}`)
    assert.equal(db.calls.length, 1)
  })

  test('a losing claim logs a debug line through the logger', async () => {
    const lines: string[] = []
    await leaseCoordinator(
      standIn(() => LOSS),
      { logger: { debug: (m) => void lines.push(m) } },
    ).shouldRun(`a:b:${SLOT}`, 800)
    assert.deepEqual(lines, [
      `pg-cron-lease: 'a:b' skipped ${SLOT}: lease held, that occurrence or a later one already claimed, or it is too early`,
    ])
  })
})

describe('leaseForInterval is about 80% of the interval', () => {
  test('it is 80% of the interval, the rule the presets round to nearby whole values', () => {
    assert.equal(leaseForInterval(1000), 800)
    assert.equal(leaseForInterval(15_000), 12_000)
    assert.equal(leaseForInterval(5 * 60_000), LEASE.EVERY_5_MIN)
    assert.equal(leaseForInterval(10 * 60_000), LEASE.EVERY_10_MIN)
    const presets: [number, number][] = [
      [LEASE.EVERY_MINUTE, 60_000],
      [LEASE.EVERY_5_MIN, 5 * 60_000],
      [LEASE.EVERY_10_MIN, 10 * 60_000],
      [LEASE.HOURLY, 60 * 60_000],
      [LEASE.DAILY, 24 * 60 * 60_000],
    ]
    for (const [preset, interval] of presets) {
      assert.ok(preset >= leaseForInterval(interval) && preset < interval * 0.85, `${preset} of ${interval}`)
    }
  })

  test('it rounds to whole milliseconds and never returns less than 1', () => {
    assert.equal(leaseForInterval(1001), 801)
    assert.equal(leaseForInterval(0.5), 1)
    assert.equal(leaseForInterval(Number.MIN_VALUE), 1)
  })

  test('non-positive, non-finite, non-number or too long intervals throw a TypeError showing the value', () => {
    for (const [bad, shown] of [
      [0, '0'],
      [-1000, '-1000'],
      [Number.NaN, 'NaN'],
      [Infinity, 'Infinity'],
      ['1000', '"1000"'],
      [null, 'null'],
      [undefined, 'undefined'],
    ] as const) {
      assert.throws(
        () => leaseForInterval(bad as never),
        (error: unknown) =>
          error instanceof TypeError &&
          /intervalMs must be a positive finite number/.test(error.message) &&
          error.message.endsWith(`got ${shown}`),
      )
    }
    assert.throws(
      () => leaseForInterval(MAX_LEASE_MS * 2),
      /intervalMs must be short enough that its lease \(80%\) fits in 2147483647 ms/,
    )
    assert.equal(leaseForInterval(MAX_LEASE_MS), Math.round(MAX_LEASE_MS * 0.8))
  })
})
