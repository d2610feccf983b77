/**
 * A logger's failure never changes what a run resolves to, nor whether it is recorded: a throwing
 * `logger.warn` (here, while the outcome's write fails) or `logger.debug` (a lost claim) is the
 * logger's problem, and the warning goes to the console instead.
 */
import assert from 'node:assert/strict'
import { after, before, describe, type TestContext, test } from 'node:test'
import type pg from 'pg'
import { expireLease, freshTable, testPool } from '../../../dev/postgres.ts'
import { listLeases, withCronLease } from '../../../src/index.ts'

let pool: pg.Pool
let table: string
let job = 0
const nextJob = () => `logger-failure-${++job}`
const loggerDown = new Error('the logger is down')
const throwing = {
  warn() {
    throw loggerDown
  },
  debug() {
    throw loggerDown
  },
}

before(async () => {
  pool = await testPool({ max: 4 })
  table = await freshTable(pool, 'logger_failure')
})
after(async () => {
  await pool.end()
})

/** From now on every update of `jobName`'s row fails: the outcome record of the run under way cannot be written. */
async function breakRecord(jobName: string) {
  const fn = `${table}_refuse`
  await pool.query(
    `CREATE OR REPLACE FUNCTION "${fn}"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'record refused'; END $$`,
  )
  await pool.query(
    `CREATE TRIGGER "${fn}_${job}" BEFORE UPDATE ON "${table}" FOR EACH ROW WHEN (OLD.job_name = '${jobName}') EXECUTE FUNCTION "${fn}"()`,
  )
}

/** console.warn and console.error, captured for the test. */
function consoleLines(t: TestContext) {
  const warned: string[] = []
  const errors: unknown[][] = []
  t.mock.method(console, 'warn', (message: string) => void warned.push(message))
  t.mock.method(console, 'error', (...args: unknown[]) => void errors.push(args))
  return { warned, errors }
}

describe('a throwing logger changes nothing about a run', () => {
  test('a tick that resolved, whose record fails and whose logger.warn throws, still resolves with its result', async (t) => {
    const jobName = nextJob()
    const { warned, errors } = consoleLines(t)
    const outcome = await withCronLease(
      pool,
      jobName,
      60_000,
      async () => {
        await breakRecord(jobName)
        return 'done'
      },
      { table, logger: throwing },
    )
    assert.deepEqual(outcome, { ran: true, result: 'done' })
    assert.equal(warned.length, 1, 'the warning went to the console instead')
    assert.match(warned[0]!, new RegExp(`could not record the outcome of '${jobName}' in ${table}: record refused`))
    assert.equal(errors.length, 1)
    assert.equal(errors[0]![1], loggerDown, "the logger's own error is shown too")
  })

  test("a tick that threw, whose record fails and whose logger.warn throws, rejects with the tick's error", async (t) => {
    const jobName = nextJob()
    consoleLines(t)
    const tickError = new Error('the tick failed')
    await assert.rejects(
      withCronLease(
        pool,
        jobName,
        60_000,
        async () => {
          await breakRecord(jobName)
          throw tickError
        },
        { table, logger: throwing },
      ),
      (error) => error === tickError,
    )
  })

  test('a throwing logger.warn before the claim: the claim is sent, the tick runs and its outcome is recorded', async (t) => {
    const jobName = nextJob()
    const { warned } = consoleLines(t)
    // The lease is not shorter than the gap to the next occurrence: a warning before the claim.
    const outcome = await withCronLease(pool, jobName, 5_000, () => 'ran', {
      table,
      logger: throwing,
      occurrence: new Date(Date.now() - 1000),
      nextOccurrence: new Date(Date.now()),
    })
    assert.deepEqual(outcome, { ran: true, result: 'ran' })
    assert.match(warned[0] ?? '', /is not shorter than the 1000 ms between its occurrences/)
    const row = (await listLeases(pool, { table })).find((lease) => lease.jobName === jobName)
    assert.equal(row?.lastOutcome, 'ok')
  })

  test('a lost claim whose logger.debug throws still resolves not run', async (t) => {
    const jobName = nextJob()
    consoleLines(t)
    await withCronLease(pool, jobName, 60_000, () => {}, { table })
    const lost = await withCronLease(pool, jobName, 60_000, () => 'twice', { table, logger: throwing })
    assert.deepEqual(lost, { ran: false, result: null })
    await expireLease(pool, table, jobName)
  })
})
