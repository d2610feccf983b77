/**
 * A row the doctor's race left behind (a doctor killed before it could delete it) is never read as
 * one of the user's jobs: listLeases, check, status and listRuns leave it out.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { main } from '../../../src/cli/main.ts'
import { listLeases, listRuns, quoteTable, withCronLease } from '../../../src/index.ts'
import { historyTableOf } from '../../../src/sql.ts'

let pool: pg.Pool
let table: string
const LEFT = 'pg-cron-lease:doctor:0123456789abcdef'

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'leftover')
})
after(() => pool.end())

async function check(): Promise<{ code: number; out: string }> {
  let out = ''
  const io = { write: (text: string) => (out += text) }
  const url = await testDatabaseUrl()
  const code = await main(['check', '--table', table, '--url', url], { stdout: io, stderr: io, env: {} })
  return { code, out }
}

describe("the doctor's own job is never a user's", () => {
  test('a race row left overdue and died: listLeases, listRuns and check leave it out; a user job beside it is read', async () => {
    // The race's job, left as a killed doctor leaves it: claimed, run never ended, long overdue.
    await withCronLease(pool, LEFT, 1, () => 'raced', { table, everyMs: 1000 })
    await pool.query(
      `UPDATE ${quoteTable(table)} SET claimed_at = claimed_at - interval '1 day', last_started_at = claimed_at - interval '1 day',
         last_finished_at = NULL, lease_until = clock_timestamp() - interval '1 day', next_due_at = clock_timestamp() - interval '1 day'
       WHERE job_name = $1`,
      [LEFT],
    )
    const [stored] = (
      await pool.query(`SELECT count(*)::int AS n FROM ${quoteTable(historyTableOf(table))} WHERE job_name = $1`, [
        LEFT,
      ])
    ).rows
    assert.equal(stored.n, 1, 'its run is in the history table itself')
    await withCronLease(pool, 'user:job', 60_000, () => 'ran', { table, everyMs: 3_600_000 })
    assert.deepEqual(
      (await listLeases(pool, { table })).map((l) => l.jobName),
      ['user:job'],
    )
    assert.deepEqual(
      (await listRuns(pool, { table })).map((r) => r.jobName),
      ['user:job'],
    )
    const { code, out } = await check()
    assert.equal(code, 0, out)
    assert.match(out, /^OK: 1 job healthy/)
  })

  test("a user job with a name like it, but not the race's own form, is read", async () => {
    await withCronLease(pool, 'pg-cron-lease:doctor:mine', 60_000, () => 'ran', { table, everyMs: 3_600_000 })
    assert.ok((await listLeases(pool, { table })).some((l) => l.jobName === 'pg-cron-lease:doctor:mine'))
  })
})
