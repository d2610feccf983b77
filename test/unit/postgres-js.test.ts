import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import postgres from 'postgres'
import { fromPostgresJs, withCronLease } from '../../src/index.ts'
import { CURRENT_COLUMN_NAMES, claimSql, probeSql, TABLE_FACTS_SQL } from '../../src/sql.ts'
import { isProbe, TOKEN } from '../helpers/stand-in.ts'

type Sent = { text: string; params: unknown; options?: unknown }

/**
 * A stand-in for postgres.js's `sql`: `unsafe` resolves to an Array of rows with `.count`. The read
 * of the table's facts is answered as a table of the current shape would, and kept in `facts`; the
 * claim's probe is answered "not held" (so the claim is sent) unless `held`, and kept in `probes`.
 */
function fakeSql(answer: () => unknown, held = false) {
  const calls: Sent[] = []
  const facts: Sent[] = []
  const probes: Sent[] = []
  return {
    calls,
    facts,
    probes,
    unsafe(text: string, params?: unknown[], options?: unknown) {
      if (text === TABLE_FACTS_SQL) {
        facts.push({ text, params, options })
        const row = { exists: true, columns: 18, current: true, history: true, checked_at: new Date().toISOString() }
        return Promise.resolve(rowList([row], 1)) as Promise<any>
      }
      if (isProbe({ text, params: params ?? [] })) {
        probes.push({ text, params, options })
        return Promise.resolve(held ? rowList([{ held: true }], 1) : rowList([], 0)) as Promise<any>
      }
      calls.push({ text, params, options })
      return Promise.resolve().then(answer) as Promise<any>
    },
  }
}

function rowList(rows: unknown[], count: number) {
  return Object.assign([...rows], { count })
}

describe('fromPostgresJs needs postgres.js only as a shape', () => {
  test('the adapter has no runtime import or require of the postgres package', () => {
    const source = readFileSync(new URL('../../src/adapters/postgres-js.ts', import.meta.url), 'utf8')
    assert.doesNotMatch(source, /^\s*import(?!\s+type\b)[^\n]*['"]postgres['"]/m)
    assert.doesNotMatch(source, /(require|import)\(\s*['"]postgres['"]\s*\)/)
  })
})

describe('fromPostgresJs validates its argument', () => {
  test('anything without an unsafe function is rejected with a TypeError naming sql and showing the value', () => {
    for (const [bad, shown] of [
      [undefined, 'undefined'],
      [null, 'null'],
      [{}, '{}'],
      [{ unsafe: 'x' }, '{"unsafe":"x"}'],
      ['postgres://x', '"postgres://x"'],
    ] as const) {
      assert.throws(
        () => fromPostgresJs(bad as never),
        (error: unknown) =>
          error instanceof TypeError &&
          /^pg-cron-lease: sql must be a postgres.js sql/.test(error.message) &&
          error.message.endsWith(`got ${shown}`),
      )
    }
  })
})

describe('a postgres.js sql passed without the adapter', () => {
  test('is rejected before any query, and the message points at fromPostgresJs', async () => {
    const sql = postgres({ host: '127.0.0.1', port: 1, max: 1 })
    await assert.rejects(
      withCronLease(sql as never, 'job', 1000, () => null),
      (error: unknown) => {
        return error instanceof TypeError && /^pg-cron-lease: db must be .*fromPostgresJs\(sql\)/.test(error.message)
      },
    )
    await sql.end({ timeout: 0 })
  })
})

describe('fromPostgresJs reads what postgres.js resolves to', () => {
  test('a row list with count 1 is a win carrying the token; count 0 is a loss', async () => {
    const win = fakeSql(() => rowList([{ claimed_at: TOKEN }], 1))
    const won = await withCronLease(fromPostgresJs(win), 'job', 1000, (ctx) => ctx.claimToken)
    assert.deepEqual(won, { ran: true, result: TOKEN })

    const loss = fakeSql(() => rowList([], 0))
    assert.deepEqual(await withCronLease(fromPostgresJs(loss), 'job', 1000, () => 'ran'), { ran: false, result: null })

    // A row from the probe is read as postgres.js gives it too: the lease is held, and no claim follows.
    const held = fakeSql(() => rowList([{ claimed_at: TOKEN }], 1), true)
    assert.deepEqual(await withCronLease(fromPostgresJs(held), 'job', 1000, () => 'ran'), { ran: false, result: null })
    assert.deepEqual([held.probes.length, held.calls.length], [1, 0])
  })

  test('the text and parameters are passed to unsafe unchanged', async () => {
    const sql = fakeSql(() => rowList([{ claimed_at: TOKEN }], 1))
    await withCronLease(fromPostgresJs(sql), 'job', 1000, () => null, { holder: 'h', record: false })
    assert.deepEqual(
      sql.probes.map((c) => [c.text, c.params]),
      [[probeSql('cron_leases'), ['job', null]]],
    )
    assert.equal(sql.calls.length, 1)
    assert.equal(sql.calls[0]!.text, claimSql('cron_leases', 'lease'))
    assert.deepEqual(sql.calls[0]!.params, ['job', 1000, 'h', null, 100, null, null, null])
    assert.equal(sql.facts.length, 1)
    assert.deepEqual(sql.facts[0]!.params, ['"cron_leases"', CURRENT_COLUMN_NAMES, '"cron_leases_runs"'])
    assert.ok(Array.isArray((sql.facts[0]!.params as unknown[])[1]), 'the column names go as one array parameter')
  })

  test("unsafe is asked to prepare, so the sql instance's own prepare option decides", async () => {
    const sql = fakeSql(() => rowList([{ claimed_at: TOKEN }], 1))
    await withCronLease(fromPostgresJs(sql), 'job', 1000, (ctx) => ctx.renew(), { record: false })
    assert.deepEqual(
      sql.calls.map((c) => c.options),
      [{ prepare: true }, { prepare: true }],
      'the claim and the renew',
    )
    assert.deepEqual(
      sql.facts.map((c) => c.options),
      [{ prepare: true }],
      "the facts read too: the sql instance's option decides",
    )
    assert.deepEqual(
      sql.probes.map((c) => c.options),
      [{ prepare: true }],
      'and the probe',
    )
  })

  test('an unsafe written with two parameters still fits, and is called with this as the sql', async () => {
    const facts = rowList(
      [{ exists: true, columns: 18, current: true, history: true, checked_at: new Date().toISOString() }],
      1,
    )
    const sql = {
      answer: rowList([], 0),
      unsafe(this: { answer: unknown }, text: string, _params?: unknown[]) {
        return Promise.resolve(text === TABLE_FACTS_SQL ? facts : this.answer) as Promise<any>
      },
    }
    assert.deepEqual(await withCronLease(fromPostgresJs(sql), 'job', 1000, () => 'ran'), { ran: false, result: null })
  })

  test('a result that is neither a row list nor carries a count is refused and the tick does not run', async () => {
    for (const odd of [undefined, null, {}, { count: 'one' }, 'INSERT 0 1']) {
      let ran = false
      await assert.rejects(
        withCronLease(fromPostgresJs(fakeSql(() => odd)), 'job', 1000, () => {
          ran = true
        }),
        /cannot tell whether the lease for 'job' was claimed/,
      )
      assert.equal(ran, false)
    }
  })

  test('a driver error propagates unchanged and the tick does not run', async () => {
    const failure = new Error('connection refused')
    let ran = false
    await assert.rejects(
      withCronLease(fromPostgresJs(fakeSql(() => Promise.reject(failure))), 'job', 1000, () => {
        ran = true
      }),
      (error) => error === failure,
    )
    assert.equal(ran, false)
  })
})
