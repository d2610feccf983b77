import assert from 'node:assert/strict'
import os from 'node:os'
import { describe, test } from 'node:test'
import { formatValue as describeValue } from '../../src/format-value.ts'
import {
  type LeaseOptions,
  leaseCoordinator,
  leasedTick,
  listLeases,
  MAX_LEASE_MS,
  withCronLease,
} from '../../src/index.ts'
import { MAX_INTERVAL_MS } from '../../src/presets.ts'
import { claimSql, listLeasesSql, probeSql } from '../../src/sql.ts'
import { isRecord, LOSS, standIn, WIN } from '../helpers/stand-in.ts'

const DEFAULT_HOLDER = `${os.hostname()}:${process.pid}`

const tick = () => 'ran'

/** Calls withCronLease with one bad argument and proves it rejects before any query. */
async function rejectsBeforeQuery(
  args: (db: ReturnType<typeof standIn>) => Parameters<typeof withCronLease>,
  message: RegExp,
) {
  const db = standIn()
  await assert.rejects(
    withCronLease(...args(db)),
    (error: unknown) => error instanceof TypeError && message.test(error.message),
  )
  assert.equal(db.calls.length, 0, 'no query may be made for a bad argument')
  assert.equal(db.facts.length, 0, "not even the read of the table's facts")
}

describe('every argument is validated before the database is touched', () => {
  test('db without a query function names db and shows the value', async () => {
    for (const bad of [undefined, null, {}, { query: 'select' }, 42, 'postgres://x']) {
      await assert.rejects(withCronLease(bad as never, 'job', 1000, tick), /db must be .*query/)
    }
  })

  test('jobName must be a non-empty string without NUL', async () => {
    for (const [bad, shown] of [
      ['', '""'],
      [undefined, 'undefined'],
      [null, 'null'],
      [42, '42'],
      [{}, '{}'],
      ['a\0b', '"a\\u0000b"'],
    ] as const) {
      await rejectsBeforeQuery((db) => [db, bad as never, 1000, tick], new RegExp(`jobName .*${escapeRegExp(shown)}`))
    }
  })

  test('leaseMs must be finite, at least 1 ms after rounding, and at most MAX_LEASE_MS', async () => {
    for (const bad of [Number.NaN, Infinity, -Infinity, 0, 0.4, -5, '1000', null, undefined, 10n, MAX_LEASE_MS + 1]) {
      await rejectsBeforeQuery((db) => [db, 'job', bad as never, tick], /leaseMs must be/)
    }
  })

  test('leaseMs is rounded to whole milliseconds', async () => {
    const db = standIn()
    await withCronLease(db, 'job', 0.6, tick)
    await withCronLease(db, 'job', 1499.5, tick)
    await withCronLease(db, 'job', MAX_LEASE_MS, tick)
    assert.deepEqual(
      db.calls.filter((c) => !isRecord(c)).map((c) => c.params[1]),
      [1, 1500, MAX_LEASE_MS],
    )
  })

  test('runTick must be a function', async () => {
    for (const bad of [undefined, null, 'tick', {}, Promise.resolve()]) {
      await rejectsBeforeQuery((db) => [db, 'job', 1000, bad as never], /runTick must be a function/)
    }
  })

  test('opts must be a plain object (or null, for none)', async () => {
    for (const bad of ['x', 5, [], true]) {
      await rejectsBeforeQuery((db) => [db, 'job', 1000, tick, bad as never], /opts must be an object/)
    }
  })

  test('an unknown option is a typo and is rejected by name', async () => {
    await rejectsBeforeQuery(
      (db) => [db, 'job', 1000, tick, { tabel: 'x' } as unknown as LeaseOptions],
      /opts\.tabel must be one of the known options/,
    )
  })

  test('holder, when given, must be a string without NUL', async () => {
    for (const bad of [5, {}, 'a\0']) {
      await rejectsBeforeQuery((db) => [db, 'job', 1000, tick, { holder: bad as never }], /opts\.holder must be/)
    }
  })

  test('table must be an identifier or schema.identifier', async () => {
    for (const bad of ['x; DROP TABLE y', 'a.b.c', '', '1abc', 'has space', 5, null, 'a.', '.a', '"q"']) {
      await rejectsBeforeQuery((db) => [db, 'job', 1000, tick, { table: bad as never }], /opts\.table must be/)
    }
  })

  test('logger must be an object whose debug and error, if present, are functions', async () => {
    for (const bad of ['console', 5, { debug: 'yes' }, { error: 1 }]) {
      await rejectsBeforeQuery((db) => [db, 'job', 1000, tick, { logger: bad as never }], /opts\.logger/)
    }
  })

  test('keepAlive needs 1 <= beatMs < extendMs <= leaseMs', async () => {
    for (const bad of [
      null,
      5,
      {},
      { everyMs: 100 },
      { extendMs: 100 },
      { beatMs: 100, extendMs: 100 },
      { beatMs: 200, extendMs: 100 },
      { beatMs: 0, extendMs: 100 },
      { beatMs: 100, extendMs: 2000 },
      { beatMs: 100, extendMs: 500, beat: true },
    ]) {
      await rejectsBeforeQuery((db) => [db, 'job', 1000, tick, { keepAlive: bad as never }], /opts\.keepAlive/)
    }
  })

  test('the message shows the bad value, and valid arguments make exactly one claim: its probe, then it', async () => {
    await assert.rejects(withCronLease(standIn(), 'job', -3, tick), { message: /leaseMs.*got -3$/ })
    const db = standIn()
    assert.deepEqual(await withCronLease(db, 'job', 1000, tick, { holder: 'h', table: 'a.b', logger: {} }), {
      ran: true,
      result: 'ran',
    })
    assert.equal(db.probes.length, 1)
    assert.equal(db.calls.length, 2)
    assert.ok(isRecord(db.calls[1]!), 'the second records the outcome')
  })
})

describe('an interval is at most MAX_INTERVAL_MS (10 years), so the next due time stored always reads back as a Date', () => {
  test('opts.everyMs and the everyMs of a forInterval-style lease above it are refused before any query', async () => {
    await rejectsBeforeQuery(
      (db) => [db, 'job', 1000, tick, { everyMs: MAX_INTERVAL_MS + 1 }],
      new RegExp(`^pg-cron-lease: opts\\.everyMs must be at most ${MAX_INTERVAL_MS} ms, got ${MAX_INTERVAL_MS + 1}$`),
    )
    await rejectsBeforeQuery(
      (db) => [db, 'job', { leaseMs: 1000, everyMs: MAX_INTERVAL_MS + 1 } as never, tick],
      new RegExp(`^pg-cron-lease: leaseMs\\.everyMs must be at most ${MAX_INTERVAL_MS} ms`),
    )
    assert.throws(
      () => leasedTick(standIn(), 'job', 1000, tick, { everyMs: MAX_INTERVAL_MS + 1 }),
      /opts\.everyMs must be at most/,
    )
  })

  test('MAX_INTERVAL_MS itself is accepted: ten years of 365.25 days, and is what the claim sends as the interval', async () => {
    assert.equal(MAX_INTERVAL_MS, 10 * 365.25 * 86_400_000)
    const db = standIn()
    await withCronLease(db, 'job', 1000, tick, { everyMs: MAX_INTERVAL_MS, record: false })
    await withCronLease(db, 'job', { leaseMs: 1000, everyMs: MAX_INTERVAL_MS } as never, tick, { record: false })
    assert.deepEqual(
      db.calls.map((c) => c.params[7]),
      [MAX_INTERVAL_MS, MAX_INTERVAL_MS],
    )
  })
})

describe('null options, an empty or null holder and a null logger mean the defaults, as in the original package', () => {
  test('null opts is no options, for withCronLease, leasedTick, leaseCoordinator and listLeases', async () => {
    // A handle each: a win leaves the probe out of that handle's next claim, and each call's probe is checked.
    const handles = [standIn(), standIn(), standIn()] as const
    const [forLease, forTick, forCoordinator] = handles
    assert.deepEqual(await withCronLease(forLease, 'job', 1000, tick, null as never), { ran: true, result: 'ran' })
    assert.deepEqual(await leasedTick(forTick, 'job', 1000, tick, null as never)(), { ran: true, result: 'ran' })
    const shouldRun = leaseCoordinator(forCoordinator, null as never).shouldRun('job:2026-11-29T22:00:00.000Z', 800)
    assert.equal(await shouldRun, true)
    const db = { calls: handles.flatMap((h) => h.calls), probes: handles.flatMap((h) => h.probes) }
    assert.deepEqual(
      db.calls.filter((c) => !isRecord(c)).map((c) => c.params),
      [
        ['job', 1000, DEFAULT_HOLDER, null, 100, null, null, null, 100, 20],
        ['job', 1000, DEFAULT_HOLDER, null, 100, null, null, null, 100, 20],
        // The coordinator keys its claim on the slot in node-cron's key; the tolerance is 10% of the lease.
        ['job', 800, DEFAULT_HOLDER, Date.parse('2026-11-29T22:00:00.000Z'), 80, null, null, null, 100, 20],
      ],
    )
    assert.ok(db.calls.filter((c) => !isRecord(c)).every((c) => c.text === claimSql('cron_leases', 'history')))
    assert.deepEqual(
      db.probes.map((c) => c.params),
      [
        ['job', null],
        ['job', null],
        ['job', Date.parse('2026-11-29T22:00:00.000Z')],
      ],
    )
    assert.ok(db.probes.every((c) => c.text === probeSql('cron_leases')))
    const empty = standIn(() => ({ rows: [{ job_name: null, checked_at: '2026-11-29T22:12:11.428993Z' }] }))
    assert.deepEqual(await listLeases(empty, null as never), [])
    assert.equal(empty.calls[0]!.text, listLeasesSql('cron_leases', 'current', true))
  })

  test("a holder of '' or null is the default holder, hostname:pid", async () => {
    for (const holder of ['', null]) {
      const db = standIn()
      await withCronLease(db, 'job', 1000, tick, { holder: holder as never })
      await leasedTick(db, 'job', 1000, tick, { holder: holder as never })()
      await leaseCoordinator(db, { holder: holder as never }).shouldRun('job:2026-11-29T22:00:00.000Z', 800)
      assert.deepEqual(
        db.calls.filter((c) => !isRecord(c)).map((c) => c.params[2]),
        [DEFAULT_HOLDER, DEFAULT_HOLDER, DEFAULT_HOLDER],
      )
    }
  })

  test('a null logger is no logger, on a loss as on a win', async () => {
    for (const answer of [LOSS, WIN]) {
      const outcome = await withCronLease(
        standIn(() => answer),
        'job',
        1000,
        tick,
        { logger: null as never },
      )
      assert.equal(outcome.ran, answer === WIN)
    }
  })

  test('everyMs: null and clockToleranceMs: null mean none, as the README says: no interval, the default tolerance', async () => {
    const db = standIn()
    const none = { everyMs: null, clockToleranceMs: null, occurrence: '2026-12-01T09:00:00Z' } as never
    await withCronLease(db, 'job', 1000, tick, none)
    await leasedTick(db, 'job', 1000, tick, { everyMs: null, clockToleranceMs: null } as never)()
    const [claim, record, bare] = db.calls
    assert.deepEqual(claim!.params.slice(3), [Date.parse('2026-12-01T09:00:00Z'), 100, null, null, null, 100, 20])
    assert.ok(isRecord(record!))
    assert.equal(claim!.params[7], null, 'no interval is declared')
    assert.deepEqual(bare!.params.slice(3), [null, 100, null, null, null, 100, 20])
    assert.equal(db.calls.length, 4)
  })

  test('a null table is still refused, not taken for the default table', async () => {
    await rejectsBeforeQuery(
      (db) => [db, 'job', 1000, tick, { table: null as never }],
      /^pg-cron-lease: opts\.table must be/,
    )
  })

  test('a null keepAlive is still refused: a tick that asked for keep-alive must not run without it', async () => {
    await rejectsBeforeQuery(
      (db) => [db, 'job', 1000, tick, { keepAlive: null as never }],
      /^pg-cron-lease: opts\.keepAlive must be an object, got null$/,
    )
  })
})

/** Arguments that cannot be looked at: a Proxy every trap of which throws, and a revoked Proxy. */
function uninspectable(): [string, object][] {
  const throwing = new Proxy(
    {},
    new Proxy(
      {},
      {
        get: () => () => {
          throw new Error('trap')
        },
      },
    ),
  )
  const { proxy: revoked, revoke } = Proxy.revocable({}, {})
  revoke()
  return [
    ['a Proxy whose traps throw', throwing],
    ['a revoked Proxy', revoked],
  ]
}

/** A TypeError whose message names `name` as the bad argument. */
const names = (name: string) => (error: unknown) =>
  error instanceof TypeError && new RegExp(`^pg-cron-lease: ${escapeRegExp(name)} must be`).test(error.message)

describe('an argument that cannot be inspected is still named, before any query', () => {
  for (const [kind, value] of uninspectable()) {
    test(`${kind} as db, opts, opts.keepAlive or opts.logger of withCronLease`, async () => {
      await assert.rejects(withCronLease(value as never, 'job', 1000, tick), names('db'))
      for (const [name, opts] of [
        ['opts', value],
        ['opts.keepAlive', { keepAlive: value }],
        ['opts.logger', { logger: value }],
      ] as const) {
        const db = standIn()
        await assert.rejects(withCronLease(db, 'job', 1000, tick, opts as never), names(name))
        assert.equal(db.calls.length, 0, name)
      }
    })

    test(`${kind} as the db or the options of leasedTick, leaseCoordinator and listLeases`, async () => {
      const db = standIn()
      assert.throws(() => leasedTick(value as never, 'job', 1000, tick), names('db'))
      assert.throws(() => leasedTick(db, 'job', 1000, tick, value as never), names('opts'))
      assert.throws(() => leasedTick(db, 'job', 1000, tick, { logger: value as never }), names('opts.logger'))
      assert.throws(() => leaseCoordinator(value as never), names('db'))
      assert.throws(() => leaseCoordinator(db, value as never), names('opts'))
      await assert.rejects(listLeases(value as never), names('db'))
      await assert.rejects(listLeases(db, value as never), names('opts'))
      assert.equal(db.calls.length, 0)
    })

    test(`${kind} is described without throwing, as what it is`, async () => {
      assert.equal(describeValue(value), 'a Proxy that throws when inspected')
      assert.equal(describeValue([value]), 'an array of length 1')
      await assert.rejects(withCronLease(standIn(), 'job', 1000, tick, value as never), {
        message: /^pg-cron-lease: opts must be .*, got a Proxy that throws when inspected$/,
      })
    })
  }
})

function escapeRegExp(text: string) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}
