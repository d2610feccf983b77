/**
 * Fuzzed input against real Postgres: random table names end to end, random job names round
 * tripping exactly, and random sequences of claim / renew / wait / force-expire by several holders
 * checked against a small reference model of the lease. Runs are bounded so the file stays short.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import fc from 'fast-check'
import pg from 'pg'
import { expireLease, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { escapeControls } from '../../../src/format-value.ts'
import { createTableSql, type LeaseContext, quoteTable, withCronLease } from '../../../src/index.ts'
import { type HeldClaim, tryHoldClaim } from '../../helpers/held-claim.ts'
import { ALWAYS_FITS_BYTES, isJobName, isTableName, utf8Bytes } from '../../helpers/rules.ts'

// Everything runs in a private database, so a random name can never meet another test's table.
let admin: pg.Pool
let db: pg.Pool
let database: string

before(async () => {
  admin = await testPool({ max: 2 })
  database = `fuzz_${randomBytes(5).toString('hex')}`
  await admin.query(`CREATE DATABASE ${database}`)
  const url = new URL(await testDatabaseUrl())
  url.pathname = `/${database}`
  db = new pg.Pool({ connectionString: url.toString(), max: 4 })
})

after(async () => {
  await db.end()
  await admin.query(`DROP DATABASE ${database}`)
  await admin.end()
})

/**
 * A failing property against a database shrinks slowly (every step is a round trip), so the whole
 * run, shrinking included, is cut off after a minute and then reported as a failure.
 */
const BOUNDED = { interruptAfterTimeLimit: 60_000, markInterruptAsFailure: true }

/** No test may hang the suite: a fault that never resolves fails the test instead. */
const TIMEOUT = 150_000

/**
 * Where the library's warnings go in this file: kept, not printed. A warning quotes the job name,
 * and a fuzzed one would reach the log as it is, control characters and all; the count is
 * reported at the end.
 */
const warnings: string[] = []
const QUIET = { logger: { warn: (message: string) => void warnings.push(message) } }

after(() => {
  if (warnings.length > 0) console.log(`# ${warnings.length} warnings kept, the first: ${escapeControls(warnings[0]!)}`)
})

/** A driver's error, not one of the library's own. */
function isDriverError(error: unknown): boolean {
  return error instanceof Error && !(error instanceof TypeError) && !error.message.startsWith('pg-cron-lease')
}

describe('random table names: quoteTable throws, or the name works end to end', () => {
  const RESERVED = ['select', 'user', 'order', 'table', 'group', 'from', 'where', 'limit', 'end', 'check', 'default']
  const part = fc.oneof(
    fc.string({ unit: fc.constantFrom('a', 'q', 'Z', 'Q', '_', '$', '0', '9'), minLength: 1, maxLength: 70 }),
    fc.constantFrom(...RESERVED, ...RESERVED.map((w) => w.toUpperCase()), 'Select', 'User', 'public', 'cron_leases'),
    fc.constantFrom('pg_class', 'pg_type', 'pg_settings', 'pg_leases', 'information_schema'),
    fc.string({ maxLength: 12 }),
    fc.string({ unit: 'binary', maxLength: 6 }),
  )
  const tableName = fc.oneof(
    part,
    fc.tuple(part, part).map(([schema, name]) => `${schema}.${name}`),
    fc.tuple(fc.constantFrom('pg_temp', 'pg_catalog', 'pg_x', 'PG_TEMP', 'Pg_x'), part).map((p) => p.join('.')),
    fc.tuple(part, part, part).map((parts) => parts.join('.')),
  )

  test('a few hundred names, reserved words, $, _, mixed case and >63-byte names included', {
    timeout: TIMEOUT,
  }, async (t) => {
    const seen = { rejected: 0, worked: 0, shadowed: 0 }
    await fc.assert(
      fc.asyncProperty(tableName, async (name) => {
        let quoted: string
        try {
          quoted = quoteTable(name)
        } catch (error) {
          assert.ok(error instanceof TypeError)
          assert.equal(isTableName(name), false, `quoteTable refused a valid name: ${escapeControls(name)}`)
          seen.rejected++
          return
        }
        assert.equal(isTableName(name), true, `quoteTable accepted an invalid name: ${escapeControls(name)}`)
        const [schema, bare] = name.includes('.') ? name.split('.') : [undefined, name]
        if (schema === undefined && (await isCatalogRelation(bare as string))) {
          // An unqualified name of a system catalog resolves to pg_catalog first: the claim fails
          // loudly, and no tick runs (documented in the README's limits).
          let ticks = 0
          await assert.rejects(
            withCronLease(db, 'job', 60_000, () => ticks++, { table: name, ...QUIET }),
            isDriverError,
          )
          assert.equal(ticks, 0)
          seen.shadowed++
          return
        }
        if (schema !== undefined) await db.query(`CREATE SCHEMA IF NOT EXISTS ${quoteTable(schema)}`)
        await db.query(createTableSql(name))
        try {
          const first = await withCronLease(db, 'job', 60_000, () => 'ran', { table: name, holder: 'first', ...QUIET })
          const second = await withCronLease(db, 'job', 60_000, () => 'ran', {
            table: name,
            holder: 'second',
            ...QUIET,
          })
          assert.deepEqual([first.ran, second.ran], [true, false])
          const { rows } = await db.query(`SELECT job_name, holder FROM ${quoted}`)
          assert.deepEqual(rows, [{ job_name: 'job', holder: 'first' }])
        } finally {
          await db.query(`DROP TABLE ${quoted}`)
        }
        seen.worked++
      }),
      { numRuns: 200, ...BOUNDED },
    )
    t.diagnostic(`rejected ${seen.rejected}, worked end to end ${seen.worked}, catalog names ${seen.shadowed}`)
    assert.ok(seen.worked >= 20 && seen.rejected >= 20, 'both sides of the property were exercised')
  })

  test('a schema named pg_* is refused before any query: in pg_temp every connection would hold its own lease', {
    timeout: TIMEOUT,
  }, async () => {
    // What the library prevents: two sessions each create "pg_temp"."leases" and each insert the
    // same job, because each sees only its own temporary table.
    const sessions = [await db.connect(), await db.connect()]
    try {
      for (const session of sessions) {
        await session.query('CREATE TABLE "pg_temp"."leases" (job_name TEXT PRIMARY KEY)')
        assert.equal((await session.query(`INSERT INTO "pg_temp"."leases" VALUES ('job')`)).rowCount, 1)
      }
    } finally {
      for (const session of sessions) {
        await session.query('DROP TABLE IF EXISTS "pg_temp"."leases"')
        session.release()
      }
    }
    for (const table of ['pg_temp.leases', 'pg_catalog.leases', 'pg_toast.leases']) {
      assert.throws(() => quoteTable(table), TypeError)
      assert.throws(() => createTableSql(table), TypeError)
      await assert.rejects(
        withCronLease(db, 'job', 60_000, () => 1, { table, ...QUIET }),
        {
          name: 'TypeError',
          message: /opts\.table must be .*not named pg_\*/,
        },
      )
    }
  })

  test('reserved words, $ and mixed case, unqualified and schema-qualified, each work end to end', {
    timeout: TIMEOUT,
  }, async () => {
    for (const name of [
      'select',
      'user',
      'order',
      'Order',
      'a$b',
      '_x',
      'MiXeD',
      'user.select',
      'Order.User',
      'x$.y$',
    ]) {
      const [schema] = name.includes('.') ? name.split('.') : []
      if (schema) await db.query(`CREATE SCHEMA IF NOT EXISTS ${quoteTable(schema)}`)
      await db.query(createTableSql(name))
      try {
        assert.equal(
          (await withCronLease(db, 'job', 60_000, () => 1, { table: name, ...QUIET })).ran,
          true,
          escapeControls(name),
        )
        assert.equal(
          (await withCronLease(db, 'job', 60_000, () => 1, { table: name, ...QUIET })).ran,
          false,
          escapeControls(name),
        )
      } finally {
        await db.query(`DROP TABLE ${quoteTable(name)}`)
      }
    }
  })
})

async function isCatalogRelation(name: string): Promise<boolean> {
  const { rows } = await db.query(
    `SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'pg_catalog' AND c.relname = $1`,
    [name],
  )
  return rows.length > 0
}

describe('random job names round-trip exactly through a claim and a SELECT', () => {
  const codeUnits = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) })
  const tricky = fc.string({
    unit: fc.constantFrom("'", '"', '\\', '$', '$$', '\n', '\r', '\t', '%', '_', ';', '--', '/*', 'é', 'e\u0301'),
    minLength: 1,
  })
  const jobName = fc.oneof(
    fc.string({ unit: 'binary', minLength: 1, maxLength: 200 }),
    fc.string({ unit: 'grapheme', minLength: 1 }),
    tricky,
    codeUnits,
    // Around what the index holds: code points of 1 to 4 bytes, so some fit and some do not.
    fc.string({ unit: 'binary', minLength: 400, maxLength: 1200 }),
    fc.string({ unit: 'grapheme-ascii', minLength: 1900, maxLength: 2200 }),
  )

  let table: string
  before(async () => {
    table = `names_${randomBytes(4).toString('hex')}`
    await db.query(createTableSql(table))
  })

  test('unicode, quotes, backslashes and very long names come back exactly; invalid ones are rejected first', {
    timeout: TIMEOUT,
  }, async (t) => {
    let stored = 0
    let tooLong = 0
    await fc.assert(
      fc.asyncProperty(jobName, async (name) => {
        if (!isJobName(name)) {
          await assert.rejects(
            withCronLease(db, name, 60_000, () => 1, { table, ...QUIET }),
            TypeError,
          )
          return
        }
        try {
          let ran = false
          const claim = withCronLease(
            db,
            name,
            60_000,
            (ctx) => {
              ran = true
              return ctx.jobName
            },
            { table, ...QUIET },
          )
          if (utf8Bytes(name) > ALWAYS_FITS_BYTES) {
            // Too long for the index unless it compresses: the server decides, and a refusal is
            // its error with no tick run and no row written.
            const refused = await claim.then(
              () => false,
              (error: { code?: string }) => error.code === '54000',
            )
            if (refused) {
              assert.equal(ran, false)
              const { rowCount } = await db.query(`SELECT 1 FROM ${quoteTable(table)}`)
              assert.equal(rowCount, 0)
              tooLong++
              return
            }
            assert.equal(ran, true)
          }
          const outcome = await claim
          assert.deepEqual(outcome, { ran: true, result: name })
          const { rows } = await db.query(`SELECT job_name FROM ${quoteTable(table)}`)
          assert.equal(rows.length, 1)
          assert.ok(rows[0].job_name === name, 'the stored name is the same string')
          const { rowCount } = await db.query(`SELECT 1 FROM ${quoteTable(table)} WHERE job_name = $1`, [name])
          assert.equal(rowCount, 1)
          stored++
        } finally {
          await db.query(`DELETE FROM ${quoteTable(table)}`)
        }
      }),
      { numRuns: 200, ...BOUNDED },
    )
    t.diagnostic(`${stored} of 200 names stored and read back, ${tooLong} refused by the index as too long`)
    assert.ok(stored >= 100)
  })

  test('a 2048-byte name that does not compress fits the primary key index', { timeout: TIMEOUT }, async () => {
    const name = randomBytes(1536).toString('base64')
    assert.equal(Buffer.byteLength(name), 2048)
    assert.equal((await withCronLease(db, name, 60_000, () => 1, { table, ...QUIET })).ran, true)
    const { rows } = await db.query(`SELECT job_name FROM ${quoteTable(table)}`)
    assert.ok(rows[0]?.job_name === name)
    await db.query(`DELETE FROM ${quoteTable(table)}`)
  })

  test('a name too long for the index rejects with the server error, runs no tick and writes nothing', {
    timeout: TIMEOUT,
  }, async () => {
    let ran = false
    await assert.rejects(
      withCronLease(
        db,
        randomBytes(3000).toString('base64'),
        60_000,
        () => {
          ran = true
        },
        { table, ...QUIET },
      ),
      { code: '54000' },
    )
    assert.equal(ran, false)
    assert.equal((await db.query(`SELECT 1 FROM ${quoteTable(table)}`)).rowCount, 0)
    const compressible = 'x'.repeat(100_000)
    assert.equal(
      (await withCronLease(db, compressible, 60_000, () => 1, { table, ...QUIET })).ran,
      true,
      'a long name that compresses fits',
    )
    await db.query(`DELETE FROM ${quoteTable(table)}`)
  })

  test('names that differ only by Unicode normalisation or case are different leases', {
    timeout: TIMEOUT,
  }, async () => {
    for (const name of ['caf\u00e9', 'cafe\u0301', 'Job', 'job', 'a\\b', 'a\\\\b']) {
      assert.equal((await withCronLease(db, name, 60_000, () => 1, { table, ...QUIET })).ran, true, name)
    }
    const { rows } = await db.query(`SELECT job_name FROM ${quoteTable(table)} ORDER BY job_name`)
    assert.equal(rows.length, 6)
    await db.query(`DELETE FROM ${quoteTable(table)}`)
  })
})

// ---- A model-based test of the lease -------------------------------------------------------------

type Command =
  | { kind: 'claim'; holder: number; ms: number }
  | { kind: 'renew'; holder: number; ms: number }
  | { kind: 'wait'; ms: number }
  | { kind: 'expire' }

const HOLDERS = 3
const SHORT = 200
const LONG = 60_000
/** Allowance for the two clocks (this process's monotonic one, the database's) ticking apart. */
const MARGIN = 25

const command: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('claim' as const),
      holder: fc.nat(HOLDERS - 1),
      ms: fc.constantFrom(SHORT, LONG),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('renew' as const),
      holder: fc.nat(HOLDERS - 1),
      ms: fc.constantFrom(SHORT, LONG),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 20, max: 250 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('expire' as const) }) },
)

/**
 * The reference model. The lease's expiry is known only within [lo, hi] on this process's
 * monotonic clock (the database set it somewhere between sending the statement and reading its
 * reply), so a check made near the expiry may go either way; everything else is certain.
 */
interface Model {
  lease: { owner: number; claim: number; lo: number; hi: number } | null
  contexts: ({ ctx: LeaseContext; claim: number } | undefined)[]
  claims: number
}

type State = 'free' | 'held' | 'expired' | 'unsure'

function stateDuring(model: Model, sent: number, answered: number): State {
  const { lease } = model
  if (!lease) return 'free'
  if (answered + MARGIN < lease.lo) return 'held'
  if (sent - MARGIN >= lease.hi) return 'expired'
  return 'unsure'
}

describe('model-based: claim, renew, wait and force-expire by several holders follow the reference model', () => {
  let table: string
  before(async () => {
    table = `model_${randomBytes(4).toString('hex')}`
    await db.query(createTableSql(table))
  })

  test('random command sequences on real Postgres agree with the model', { timeout: TIMEOUT }, async (t) => {
    const tally = {
      certainClaims: 0,
      wins: 0,
      losses: 0,
      renewedTrue: 0,
      renewedFalse: 0,
      replacedRenews: 0,
      unsure: 0,
    }
    let run = 0
    await fc.assert(
      fc.asyncProperty(fc.array(command, { minLength: 5, maxLength: 30 }), async (commands) => {
        const job = `model-${run++}`
        const model: Model = { lease: null, contexts: Array(HOLDERS).fill(undefined), claims: 0 }
        const running: HeldClaim[] = []
        try {
          for (const step of commands) {
            if (step.kind === 'wait') await sleep(step.ms)
            else if (step.kind === 'expire') {
              await expireLease(db, table, job)
              if (model.lease) model.lease = { ...model.lease, lo: -Infinity, hi: -Infinity }
            } else if (step.kind === 'claim') {
              const sent = performance.now()
              // The tick keeps running until the sequence ends, so its context can still renew.
              const claimed = await tryHoldClaim(db, job, step.ms, { table, holder: `holder-${step.holder}`, ...QUIET })
              if (claimed) running.push(claimed)
              const outcome = { ran: claimed !== null, result: claimed?.ctx }
              const answered = performance.now()
              const state = stateDuring(model, sent, answered)
              if (state === 'unsure') tally.unsure++
              else {
                tally.certainClaims++
                assert.equal(outcome.ran, state !== 'held', `claim by ${step.holder} with the lease ${state}`)
              }
              if (outcome.ran) {
                tally.wins++
                const claim = ++model.claims
                model.lease = { owner: step.holder, claim, lo: sent + step.ms, hi: answered + step.ms }
                model.contexts[step.holder] = { ctx: outcome.result as LeaseContext, claim }
              } else tally.losses++
            } else {
              // The renew is made by one of the holders that ever won, current or replaced.
              const winners = model.contexts.flatMap((c, holder) => (c ? [holder] : []))
              if (winners.length === 0) continue
              const mine = model.contexts[winners[step.holder % winners.length] as number] as NonNullable<
                Model['contexts'][number]
              >
              const sent = performance.now()
              const renewed = await mine.ctx.renew(step.ms)
              const answered = performance.now()
              if (mine.claim !== model.lease?.claim) {
                tally.replacedRenews++
                assert.equal(renewed, false, 'a replaced claim can never renew')
              } else {
                const state = stateDuring(model, sent, answered)
                if (state === 'unsure') tally.unsure++
                else assert.equal(renewed, state === 'held', `renew by the current holder with the lease ${state}`)
              }
              if (renewed) {
                tally.renewedTrue++
                model.lease = {
                  ...(model.lease as NonNullable<Model['lease']>),
                  lo: sent + step.ms,
                  hi: answered + step.ms,
                }
              } else {
                tally.renewedFalse++
                assert.equal(mine.ctx.signal.aborted, true, 'a renew that resolves false aborts ctx.signal')
              }
            }
            // The row always shows the model's current claim: a loss or a failed renew wrote nothing.
            const { rows } = await db.query(
              `SELECT holder, to_char(claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS token
               FROM ${quoteTable(table)} WHERE job_name = $1`,
              [job],
            )
            if (!model.lease) assert.equal(rows.length, 0)
            else {
              assert.equal(rows[0]?.holder, `holder-${model.lease.owner}`)
              assert.equal(rows[0]?.token, model.contexts[model.lease.owner]?.ctx.claimToken)
            }
          }
        } finally {
          for (const claimed of running) claimed.release()
          await Promise.all(running.map((claimed) => claimed.outcome))
        }
      }),
      {
        numRuns: 40,
        ...BOUNDED,
        // Always include the fencing case: a claim replaced by another holder's tries to renew.
        examples: [
          [
            [
              { kind: 'claim', holder: 0, ms: SHORT },
              { kind: 'expire' },
              { kind: 'claim', holder: 1, ms: LONG },
              { kind: 'renew', holder: 0, ms: LONG },
              { kind: 'renew', holder: 1, ms: LONG },
            ],
          ],
        ],
      },
    )
    t.diagnostic(JSON.stringify(tally))
    assert.ok(tally.wins > 0 && tally.losses > 0 && tally.renewedTrue > 0 && tally.replacedRenews > 0)
  })
})
