/**
 * postgres.js through fromPostgresJs on a real server, beyond the shared driver cases: the claim
 * token keeps its microseconds on the way back to the server, which postgres.js would not do for a
 * parameter the server types as timestamptz.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import postgres from 'postgres'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { fromPostgresJs, quoteTable, withCronLease } from '../../../src/index.ts'
import { claimSql, probeSql, recordRunSql, renewSql } from '../../../src/sql.ts'

let pool: pg.Pool
let sql: postgres.Sql
let table: string
let jobs = 0
const nextJob = () => `pgjs-${++jobs}`

before(async () => {
  pool = await testPool({ max: 2 })
  table = await freshTable(pool, 'pgjs')
  sql = postgres(await testDatabaseUrl(), { max: 2, onnotice: () => {} })
})
after(async () => {
  await sql.end({ timeout: 5 })
  await pool.end()
})

/** Claims new jobs until a token has digits below the millisecond (bounded), so rounding would show. */
async function claimWithMicroseconds<T>(tick: (ctx: { claimToken: string | null; renew(): Promise<boolean> }) => T) {
  for (let attempt = 0; attempt < 20; attempt++) {
    const job = nextJob()
    const outcome = await withCronLease(
      fromPostgresJs(sql),
      job,
      60_000,
      async (ctx) => {
        if (ctx.claimToken?.endsWith('000Z')) return { job, skipped: true as const }
        return { job, skipped: false as const, value: await tick(ctx), token: ctx.claimToken }
      },
      { table },
    )
    if (outcome.ran && !outcome.result.skipped) return outcome.result
  }
  throw new Error('20 claims in a row had a whole-millisecond claimed_at')
}

describe('the claim token survives postgres.js with its microseconds', () => {
  test('a renew through fromPostgresJs finds a claim whose token has sub-millisecond digits', async () => {
    const { value, token } = await claimWithMicroseconds((ctx) => ctx.renew())
    assert.match(token ?? '', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/)
    assert.doesNotMatch(token ?? '', /000Z$/, 'the token has digits below the millisecond')
    assert.equal(await value, true)
  })

  test('the same token sent as a timestamptz-typed parameter is rounded by postgres.js and matches nothing', async () => {
    const { job, token } = await claimWithMicroseconds(() => null)
    const t = quoteTable(table)
    // This is the mistake the core avoids: the server types $2 as timestamptz, so postgres.js
    // serializes the string through a Date and drops the microseconds.
    const asTimestamptz = await sql.unsafe(
      `SELECT count(*)::int AS n FROM ${t} WHERE job_name = $1 AND claimed_at = $2::timestamptz`,
      [job, token as string],
    )
    const asText = await sql.unsafe(
      `SELECT count(*)::int AS n FROM ${t} WHERE job_name = $1 AND claimed_at = ($2::text)::timestamptz`,
      [job, token as string],
    )
    assert.deepEqual([asTimestamptz[0]?.n, asText[0]?.n], [0, 1])
  })

  test('inside sql.begin, the transaction sql works through the adapter and its claim commits with it', async () => {
    const job = nextJob()
    const outcome = await sql.begin((tx) =>
      withCronLease(fromPostgresJs(tx), job, 60_000, async (ctx) => ctx.renew(), { table, holder: 'in-begin' }),
    )
    assert.deepEqual(outcome, { ran: true, result: true })
    const { rows } = await pool.query(`SELECT holder FROM ${quoteTable(table)} WHERE job_name = $1`, [job])
    assert.deepEqual(rows, [{ holder: 'in-begin' }])
  })
})

describe("fromPostgresJs prepares exactly when the postgres.js instance's prepare option says so", () => {
  /** The texts this one-connection instance has prepared that mention the lease table. */
  async function preparedHere(one: postgres.Sql): Promise<string[]> {
    // By the quoted table name, which every hot statement's text holds; the catalog read takes the
    // table as a parameter, so it is left out.
    const rows = await one.unsafe('SELECT statement FROM pg_prepared_statements WHERE strpos(statement, $1) > 0', [
      quoteTable(table),
    ])
    return rows.map((r) => String(r.statement)).sort()
  }

  for (const [setting, options, expected] of [
    ['the default (prepare on)', {}, true],
    ['prepare: true', { prepare: true }, true],
    ['prepare: false', { prepare: false }, false],
  ] as const) {
    test(`${setting}: the probe, the claim and the renew are ${expected ? '' : 'not '}prepared`, async () => {
      const one = postgres(await testDatabaseUrl(), { max: 1, onnotice: () => {}, ...options })
      try {
        const db = fromPostgresJs(one)
        const job = nextJob()
        assert.deepEqual(await withCronLease(db, job, 60_000, (ctx) => ctx.renew(), { table }), {
          ran: true,
          result: true,
        })
        assert.deepEqual(await withCronLease(db, job, 60_000, () => 'twice', { table }), { ran: false, result: null })
        assert.deepEqual(
          await preparedHere(one),
          expected
            ? [probeSql(table), claimSql(table, 'history'), recordRunSql(table), renewSql(table, 'current')].sort()
            : [],
        )
      } finally {
        await one.end({ timeout: 5 })
      }
    })
  }
})
