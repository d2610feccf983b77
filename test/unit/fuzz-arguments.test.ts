/**
 * Fuzzed arguments for withCronLease: any JS value for every argument and every option. The
 * expected outcome comes from an oracle written from the documented rules (not from validate.ts):
 * either every argument is valid and the call makes its claim (the probe, then the claim), or it
 * rejects with a TypeError naming one of the bad arguments and the pool saw no query at all.
 */
import assert from 'node:assert/strict'
import os from 'node:os'
import { describe, test } from 'node:test'
import fc from 'fast-check'
import { escapeControls } from '../../src/format-value.ts'
import { MAX_LEASE_MS, withCronLease } from '../../src/index.ts'
import { optionsOf } from '../../src/options.ts'
import { MAX_INTERVAL_MS } from '../../src/presets.ts'
import { claimSql, probeSql } from '../../src/sql.ts'
import { asksForDefaultHolder, isJobName, isNameText, isNone, isTableName } from '../helpers/rules.ts'
import { type Call, isRecord, standIn, WIN } from '../helpers/stand-in.ts'

// The option list comes from the options table; the rules for each value are written out below.
const OPTION_KEYS: string[] = [...optionsOf('withCronLease')]
const MAX_INSTANT_MS = Date.parse('9999-12-31T23:59:59.999Z')
const KEEP_ALIVE_KEYS = ['beatMs', 'extendMs']

/** Any value fast-check can build, with every optional kind switched on. */
const anything = fc.anything({
  withBoxedValues: true,
  withMap: true,
  withSet: true,
  withObjectString: true,
  withNullPrototype: true,
  withBigInt: true,
  withDate: true,
  withTypedArray: true,
  withSparseArray: true,
  withUnicodeString: true,
  maxDepth: 2,
})

/** Strings of UTF-16 code units, lone surrogates included. */
const codeUnits = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) })
const anyString = fc.oneof(
  fc.string(),
  fc.string({ unit: 'binary' }),
  codeUnits,
  fc.constantFrom('', '\0', 'a\0b'),
  fc.string({ unit: 'binary', minLength: 400, maxLength: 800 }),
  fc.integer({ min: 2040, max: 2056 }).map((n) => 'x'.repeat(n)),
)

/** Numbers around every boundary of the millisecond rule, and any double. */
const msLike = fc.oneof(
  fc.double(),
  fc.integer({ min: -5, max: 5000 }),
  fc.constantFrom(0, -0, 0.49, 0.5, 1, 1.5, MAX_LEASE_MS, MAX_LEASE_MS + 0.49, MAX_LEASE_MS + 0.5, MAX_LEASE_MS + 1),
  fc.constantFrom(Number.NaN, Infinity, -Infinity, Number.MAX_VALUE, Number.MIN_VALUE, Number.EPSILON),
)

const tableLike = fc.oneof(
  fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_$]{0,8}(\.[A-Za-z_][A-Za-z0-9_$]{0,8})?$/),
  fc.string({ unit: fc.constantFrom('a', 'Z', '_', '$', '0', '.', ' ', '"', ';', '-', 'é') }),
  fc.constantFrom('pg_temp.leases', 'pg_catalog.leases', 'pg_.x', 'PG_TEMP.leases', 'Pg_temp.x', 'pg_leases', 'a.pg_x'),
  anyString,
)

const loggerLike = fc.oneof(
  fc.record(
    {
      debug: fc.oneof(
        fc.constant(() => {}),
        anything,
      ),
      error: fc.oneof(
        fc.constant(() => {}),
        anything,
      ),
    },
    { requiredKeys: [] },
  ),
  fc.constant(console),
  fc.constant(() => {}),
  anything,
)

/** Random extra keys, some of which are the known ones. */
function withExtraKeys(known: string[]) {
  return fc.dictionary(
    fc.oneof(fc.constantFrom(...known, 'tabel', '__proto__', 'constructor'), fc.string()),
    anything,
    {
      maxKeys: 2,
    },
  )
}

const keepAliveLike = fc.oneof(
  fc.record({ beatMs: msLike, extendMs: msLike }, { requiredKeys: [] }),
  fc
    .tuple(fc.record({ beatMs: msLike, extendMs: msLike }), withExtraKeys(KEEP_ALIVE_KEYS))
    .map(([a, b]) => Object.assign(b, a)),
  anything,
)

/** Counts near the edges of what the history keeps. */
const countLike = fc.oneof(fc.integer({ min: -1, max: 10_001 }), fc.constantFrom(0.5, 1.5, Number.NaN, null), anything)

/** Instants near the edges of what an occurrence may be, as Dates and as ISO text. */
const EDGE_MS = [-1, 0, 1, Date.now(), MAX_INSTANT_MS, MAX_INSTANT_MS + 1]
const instantLike = fc.oneof(
  fc.constantFrom(...EDGE_MS).map((ms) => new Date(ms)),
  fc.date(),
  fc.constantFrom(...EDGE_MS.filter((ms) => ms >= 0 && ms <= MAX_INSTANT_MS)).map((ms) => new Date(ms).toISOString()),
  fc.constantFrom('2026-02-30T06:00:00Z', '2026-12-01T06:00:00', '2026-12-01T08:00:00+02:00', null),
)

const optsLike = fc.oneof(
  fc.constant(undefined),
  fc.record(
    {
      holder: fc.oneof(anyString, anything),
      table: fc.oneof(tableLike, anything),
      logger: loggerLike,
      keepAlive: keepAliveLike,
      prepare: fc.oneof(fc.boolean(), anything),
      record: fc.oneof(fc.boolean(), anything),
      history: fc.oneof(
        fc.boolean(),
        fc.record({ keep: countLike, keepFailed: countLike }, { requiredKeys: [] }),
        fc
          .tuple(fc.record({ keep: countLike }), withExtraKeys(['keep', 'keepFailed']))
          .map(([a, b]) => Object.assign(b, a)),
        anything,
      ),
      everyMs: fc.oneof(
        msLike,
        fc.constantFrom(MAX_INTERVAL_MS, MAX_INTERVAL_MS + 0.49, MAX_INTERVAL_MS + 0.5, Number.MAX_SAFE_INTEGER, null),
        anything,
      ),
      clockToleranceMs: fc.oneof(fc.integer({ min: -2, max: MAX_LEASE_MS + 2 }), msLike, fc.constant(null), anything),
      occurrence: fc.oneof(instantLike, anything),
      nextOccurrence: fc.oneof(instantLike, anything),
    },
    { requiredKeys: [] },
  ),
  fc
    .tuple(fc.record({ holder: anyString, table: tableLike }, { requiredKeys: [] }), withExtraKeys(OPTION_KEYS))
    .map(([a, b]) => Object.assign(b, a)),
  anything,
)

/** The stand-in pool, or any other value. */
const STAND_IN = Symbol('the stand-in pool')
const dbLike = fc.oneof({ weight: 3, arbitrary: fc.constant(STAND_IN) }, anything, fc.record({ query: anything }))

const anyArguments = fc.record({
  db: dbLike,
  jobName: fc.oneof(anyString, anything),
  leaseMs: fc.oneof({ weight: 3, arbitrary: msLike }, anything),
  runTick: fc.oneof({ weight: 3, arbitrary: fc.func(anything) }, anything),
  opts: fc.oneof({ weight: 3, arbitrary: optsLike }, anything),
})

/** Mostly plausible arguments, so the valid side and single-argument mistakes are well covered. */
const plausibleArguments = fc.record({
  db: fc.oneof({ weight: 9, arbitrary: fc.constant(STAND_IN) }, dbLike),
  jobName: fc.oneof({ weight: 9, arbitrary: fc.string({ unit: 'binary', minLength: 1 }) }, anyString),
  leaseMs: fc.oneof({ weight: 9, arbitrary: fc.integer({ min: 1, max: 120_000 }) }, msLike),
  runTick: fc.oneof({ weight: 9, arbitrary: fc.func(anything) }, anything),
  opts: fc.oneof(
    { weight: 3, arbitrary: fc.constant(undefined) },
    {
      weight: 6,
      arbitrary: fc.record(
        {
          holder: fc.oneof({ weight: 9, arbitrary: fc.string({ minLength: 1 }) }, anyString),
          table: fc.oneof(
            {
              weight: 9,
              arbitrary: fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_$]{0,8}(\.[A-Za-z_][A-Za-z0-9_$]{0,8})?$/),
            },
            tableLike,
          ),
          logger: loggerLike,
          keepAlive: fc.oneof(
            {
              weight: 3,
              arbitrary: fc
                .tuple(fc.integer({ min: 1, max: 500 }), fc.integer({ min: 1, max: 500 }))
                .map(([beatMs, gap]) => ({ beatMs, extendMs: beatMs + gap })),
            },
            keepAliveLike,
          ),
        },
        { requiredKeys: [] },
      ),
    },
    optsLike,
  ),
})

const argumentSets = fc.oneof(anyArguments, plausibleArguments)

// ---- The oracle: the documented rules (test/helpers/rules.ts), independent of src/validate.ts ----

function isObjectBag(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** Whole milliseconds after rounding half up, between 1 and `max`. */
/** The one rule for a length in ms: a number that rounds to a whole ms from `min` to `max`. */
function isMs(value: unknown, max = MAX_LEASE_MS, min = 1): value is number {
  return typeof value === 'number' && value >= min - 0.5 && value < max + 0.5
}

/** The names of every argument that breaks a documented rule (empty when the call is valid). */
function problems(args: {
  db: unknown
  jobName: unknown
  leaseMs: unknown
  runTick: unknown
  opts: unknown
}): string[] {
  const found: string[] = []
  const { db, jobName, leaseMs, runTick, opts } = args
  if (db !== STAND_IN && typeof (db as { query?: unknown } | null | undefined)?.query !== 'function') found.push('db')
  if (!isJobName(jobName)) found.push('jobName')
  const leaseValid = isMs(leaseMs)
  if (!leaseValid) found.push('leaseMs')
  if (typeof runTick !== 'function') found.push('runTick')
  if (isNone(opts)) return found
  if (!isObjectBag(opts)) return [...found, 'opts']
  for (const key of Object.keys(opts)) if (!OPTION_KEYS.includes(key)) found.push(`opts.${key}`)
  const { holder, table, logger, keepAlive, prepare, record, history, everyMs, clockToleranceMs } = opts
  for (const [key, value] of Object.entries({ prepare, record })) {
    if (value !== undefined && typeof value !== 'boolean') found.push(`opts.${key}`)
  }
  // true, false, or { keep: 1 to 10,000, keepFailed: 0 to 10,000 }, each whole.
  if (history !== undefined && typeof history !== 'boolean') {
    if (!isObjectBag(history)) found.push('opts.history')
    else {
      for (const key of Object.keys(history))
        if (key !== 'keep' && key !== 'keepFailed') found.push(`opts.history.${key}`)
      const count = (value: unknown, least: number) =>
        value === undefined || (Number.isInteger(value) && (value as number) >= least && (value as number) <= 10_000)
      if (!count(history.keep, 1)) found.push('opts.history.keep')
      if (!count(history.keepFailed, 0)) found.push('opts.history.keepFailed')
    }
  }
  // null means none, as the README says, for the interval and the tolerance.
  if (!isNone(everyMs) && !isMs(everyMs, MAX_INTERVAL_MS)) found.push('opts.everyMs')
  if (!isNone(clockToleranceMs) && !isMs(clockToleranceMs, MAX_LEASE_MS, 0)) found.push('opts.clockToleranceMs')
  for (const key of ['occurrence', 'nextOccurrence']) {
    if (instantOf(opts[key]) === undefined) found.push(`opts.${key}`)
  }
  if (!asksForDefaultHolder(holder) && !isNameText(holder)) found.push('opts.holder')
  if (table !== undefined && !isTableName(table)) found.push('opts.table')
  if (!isNone(logger)) {
    if (typeof logger !== 'object' && typeof logger !== 'function') found.push('opts.logger')
    else {
      for (const method of ['debug', 'warn', 'error']) {
        const fn = (logger as Record<string, unknown>)[method]
        if (fn !== undefined && typeof fn !== 'function') found.push(`opts.logger.${method}`)
      }
    }
  }
  if (keepAlive !== undefined) {
    if (!isObjectBag(keepAlive)) found.push('opts.keepAlive')
    else {
      for (const key of Object.keys(keepAlive)) {
        if (!KEEP_ALIVE_KEYS.includes(key)) found.push(`opts.keepAlive.${key}`)
      }
      const { beatMs, extendMs } = keepAlive
      const extendValid = isMs(extendMs, leaseValid ? Math.round(leaseMs as number) : MAX_LEASE_MS)
      if (!extendValid) found.push('opts.keepAlive.extendMs')
      if (!isMs(beatMs)) found.push('opts.keepAlive.beatMs')
      else if (extendValid && Math.round(beatMs) >= Math.round(extendMs as number)) {
        found.push('opts.keepAlive.beatMs')
      }
    }
  }
  return found
}

/**
 * The instant an occurrence option names: null when left out, undefined when it is not one. Only
 * the text shapes the generators make are told apart: full ISO-8601 with a zone, on a real date.
 */
function instantOf(value: unknown): number | null | undefined {
  if (value === undefined || value === null) return null
  let ms: number
  if (value instanceof Date) ms = value.getTime()
  else if (typeof value === 'string') {
    const match = /^(\d{4})-(\d{2})-(\d{2})T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/.exec(value)
    if (!match) return undefined
    const [year, month, day] = match.slice(1).map(Number) as [number, number, number]
    if (new Date(Date.UTC(year, month - 1, day)).getUTCDate() !== day) return undefined
    ms = Date.parse(value)
  } else return undefined
  return Number.isFinite(ms) && ms >= 0 && ms <= MAX_INSTANT_MS ? ms : undefined
}

/** The gap between occurrences the call declares, which a lease not shorter than it is warned about. */
function declaredGap(opts: Record<string, unknown>): number | null {
  if (typeof opts.everyMs === 'number') return Math.round(opts.everyMs)
  const occurrence = instantOf(opts.occurrence)
  const next = instantOf(opts.nextOccurrence)
  return occurrence != null && next != null && next > occurrence ? next - occurrence : null
}

/**
 * A won claim whose token is this machine's time, as from a database whose clock agrees with it.
 * The stand-in's fixed token is far from the clock, so every valid call with a new job name would
 * warn about clock skew: ten thousand lines about nothing this test is for.
 */
function answerNow(call: Call): unknown {
  return isRecord(call) ? WIN : { rowCount: 1, rows: [{ claimed_at: new Date().toISOString().replace('Z', '000Z') }] }
}

describe('fuzzed arguments: a TypeError before any query, or the probe and one claim for a valid call', () => {
  test('10,000 random argument sets agree with the documented rules, and warn nothing', async (t) => {
    let valid = 0
    const gapWarned = new Set<string>()
    // A fuzzed call without a logger of its own (or with console as its logger) warns through
    // console.warn: whatever it writes there is kept, and must be nothing.
    const warnings: string[] = []
    const consoleWarn = console.warn
    console.warn = (...parts: unknown[]) => {
      warnings.push(escapeControls(parts.map(String).join(' ')))
    }
    try {
      await fc.assert(
        fc.asyncProperty(argumentSets, async (args) => {
          const pool = standIn(answerNow)
          const db = args.db === STAND_IN ? pool : args.db
          const expected = problems(args)
          let outcome: unknown
          let error: unknown
          try {
            outcome = await withCronLease(
              db as never,
              args.jobName as never,
              args.leaseMs as never,
              args.runTick as never,
              args.opts as never,
            )
          } catch (e) {
            error = e
          }
          if (expected.length > 0) {
            assert.ok(
              error instanceof TypeError,
              `expected a TypeError for ${expected.join(', ')}, got ${String(error)}`,
            )
            assert.ok(
              expected.some((name) => error.message.startsWith(`pg-cron-lease: ${name} must be`)),
              `the message names one of ${expected.join(', ')}: ${error.message}`,
            )
            assert.equal(pool.calls.length, 0, 'a bad argument must not reach the database')
            assert.equal(pool.probes.length, 0, 'nor be probed for')
            return
          }
          valid++
          assert.equal(error, undefined, `a valid call must not reject: ${String(error)}`)
          assert.equal((outcome as { ran: boolean }).ran, true)
          const records = (args.opts as { record?: boolean } | undefined)?.record === false ? 0 : 1
          assert.equal(pool.calls.length, 1 + records, 'a valid call makes the claim, then records the outcome')
          if (records) assert.ok(isRecord(pool.calls[1]!))
          const opts = (args.opts ?? {}) as Record<string, unknown>
          const holder = opts.holder as string | undefined
          assert.deepEqual(pool.calls[0]?.params.slice(0, 3), [
            args.jobName,
            Math.round(args.leaseMs as number),
            asksForDefaultHolder(holder) ? `${os.hostname()}:${process.pid}` : holder,
          ])
          const table = typeof opts.table === 'string' ? opts.table : 'cron_leases'
          const occurrence = instantOf(opts.occurrence) ?? null
          // The probe asks about the job and occurrence the claim is keyed on, once, before it.
          assert.deepEqual(
            pool.probes.map((call) => [call.text, call.params]),
            [[probeSql(table), [args.jobName, occurrence]]],
          )
          // The claim's parameters: a named occurrence is what the claim is keyed on (without one,
          // NULL: the lease decides alone), the tolerance is the option or 10% of the lease, and the
          // interval the declared one or the gap to the next occurrence. A claimant that records its
          // runs marks them; one that keeps the history (history is not false) also writes their
          // rows, and sends how many to keep.
          const params = pool.calls[0]!.params
          const kind = opts.record === false ? 'lease' : opts.history === false ? 'run' : 'history'
          assert.equal(pool.calls[0]!.text, claimSql(table, kind))
          assert.equal(params.length, kind === 'history' ? 10 : 8)
          const next = instantOf(opts.nextOccurrence) ?? null
          const gap = declaredGap(opts)
          const tolerance = isNone(opts.clockToleranceMs)
            ? Math.floor(Math.round(args.leaseMs as number) / 10)
            : Math.round(opts.clockToleranceMs as number)
          assert.deepEqual([params[3], params[4], params[7]], [occurrence, tolerance, gap])
          if (next !== null) assert.equal(params[6], next)
          else if (typeof opts.everyMs !== 'number') assert.deepEqual([params[5], params[6]], [null, null])
          else if (occurrence !== null) {
            const stepped = occurrence + Math.round(opts.everyMs)
            assert.equal(params[6], stepped <= MAX_INSTANT_MS ? stepped : null, 'one interval on, unless past 9999')
          }
          if (gap !== null && Math.round(args.leaseMs as number) >= gap)
            gapWarned.add(escapeControls(String(args.jobName)))
        }),
        { numRuns: 10_000 },
      )
    } finally {
      console.warn = consoleWarn
    }
    // The one warning a valid call may give: a lease not shorter than the gap it declared.
    const unexpected = warnings.filter(
      (line) =>
        ![...gapWarned].some(
          (job) =>
            line.startsWith(`pg-cron-lease: the `) && line.includes(` lease of '${job}' is not shorter than the `),
        ),
    )
    assert.deepEqual(unexpected.slice(0, 3), [], `${unexpected.length} warnings, the first of them shown`)
    t.diagnostic(`${valid} of 10,000 argument sets were valid`)
    // The generators must reach the valid side often enough for the second half to mean something.
    assert.ok(valid >= 1000, `only ${valid} of 10,000 argument sets were valid`)
  })
})

describe('options are compiled on every call, each option read once a call', () => {
  test('a bag passed on every tick is read on every call, each option once, so no call runs on a stale check', async () => {
    let reads = 0
    const logger = {
      get debug() {
        reads++
        return undefined
      },
    }
    const opts = { table: 'jobs.leases', logger }
    const db = standIn()
    for (let i = 0; i < 5; i++) await withCronLease(db, 'job', 1000, () => 1, opts)
    assert.equal(reads, 5, "the logger's method was read once per call")
    assert.equal(db.calls.filter((call) => !isRecord(call)).length, 5)
    assert.equal(db.calls[0]!.text, claimSql('jobs.leases', 'history'))
  })

  test('a bag changed after its first use is read and checked again', async () => {
    const opts: Record<string, unknown> = { table: 'a' }
    const db = standIn()
    await withCronLease(db, 'job', 1000, () => 1, opts)
    opts.table = 'b'
    await withCronLease(db, 'job', 1000, () => 1, opts)
    assert.equal(db.calls.filter((call) => !isRecord(call))[1]!.text, claimSql('b', 'history'))
    opts.holder = 42
    await assert.rejects(
      withCronLease(db, 'job', 1000, () => 1, opts),
      /opts\.holder must be a string/,
    )
    delete opts.holder
    opts.tabel = 'c'
    await assert.rejects(
      withCronLease(db, 'job', 1000, () => 1, opts),
      /opts\.tabel must be one of the known options/,
    )
  })

  test('a bad bag is refused every time, and a new bag is read anew', async () => {
    const bad = { prepare: 'yes' }
    for (let i = 0; i < 2; i++) {
      await assert.rejects(
        withCronLease(standIn(), 'job', 1000, () => 1, bad as never),
        /opts\.prepare must be true or false/,
      )
    }
    const db = standIn()
    await withCronLease(db, 'job', 1000, () => 1, { table: 'a' })
    await withCronLease(db, 'job', 1000, () => 1, { table: 'b' })
    assert.deepEqual(
      db.calls.filter((call) => !isRecord(call)).map((call) => call.text),
      [claimSql('a', 'history'), claimSql('b', 'history')],
    )
  })

  test('the same bag with another leaseMs is checked against that lease', async () => {
    const opts = { keepAlive: { beatMs: 100, extendMs: 2000 } }
    await withCronLease(standIn(), 'job', 2000, () => 1, opts)
    await assert.rejects(
      withCronLease(standIn(), 'job', 1000, () => 1, opts),
      /opts\.keepAlive\.extendMs must be at most 1000 ms/,
    )
  })

  test('every entry point refuses a key the table does not give it, naming the keys it takes', async () => {
    const documented = [
      'holder',
      'table',
      'logger',
      'keepAlive',
      'prepare',
      'record',
      'history',
      'everyMs',
      'clockToleranceMs',
      'occurrence',
      'nextOccurrence',
    ]
    assert.deepEqual(OPTION_KEYS, documented)
    await assert.rejects(
      withCronLease(standIn(), 'job', 1000, () => 1, { onError() {} } as never),
      (e: unknown) =>
        e instanceof TypeError &&
        e.message.includes(`opts.onError must be one of the known options (${OPTION_KEYS.join(', ')})`),
    )
  })
})

describe('jobName must be well-formed Unicode, of any length', () => {
  test('a lone surrogate is rejected before any query, a paired one is accepted', async () => {
    for (const bad of ['a\uD800', '\uDC00', 'x\uDBFFy', '\uDE00\uD83D']) {
      const pool = standIn(answerNow)
      await assert.rejects(
        withCronLease(pool, bad, 1000, () => 1),
        {
          name: 'TypeError',
          message: /jobName must be well-formed Unicode/,
        },
      )
      assert.equal(pool.calls.length, 0)
    }
    const pool = standIn(answerNow)
    await withCronLease(pool, 'emoji \uD83D\uDE00', 1000, () => 1)
    assert.deepEqual(pool.calls[0]?.params[0], 'emoji 😀')
  })

  test('a long name is not cut or refused here: the server decides whether it fits its index', async () => {
    for (const long of ['a'.repeat(100_000), '\u00e9'.repeat(5000), '😀'.repeat(2000)]) {
      const pool = standIn(answerNow)
      assert.equal((await withCronLease(pool, long, 1000, () => 1)).ran, true)
      assert.equal(pool.calls[0]?.params[0], long)
    }
  })
})
