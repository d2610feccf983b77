/**
 * The caller's transaction is sacred: when a `pg` client inside the caller's own `BEGIN` is passed,
 * no statement the library sends may leave that transaction aborted, on any table shape and on any
 * `pg` of the peer range (8.23, and 8.20, which has no `getTransactionStatus()`), even when the
 * statement itself fails. The failures are forced by a trigger on the lease table that raises
 * while the session setting `pgcl.fail` is 'on', so each statement can be made to fail in turn.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import {
  catchUp,
  createTableSql,
  type LeaseContext,
  leasedTick,
  listLeases,
  pauseJob,
  quoteTable,
  releaseLease,
  resumeJob,
  withCronLease,
} from '../../../src/index.ts'
import { pg820 } from '../../helpers/old-pg.ts'

let pool: pg.Pool
/** The same database through pg 8.20. */
let oldPool: pg.Pool
const marks = `tx_marks_${randomBytes(4).toString('hex')}`
const quiet = { warn() {}, debug() {} }

before(async () => {
  pool = await testPool()
  oldPool = new pg820.Pool({ connectionString: await testDatabaseUrl(), max: 4 })
  await pool.query(`CREATE TABLE ${marks} (mark TEXT NOT NULL)`)
  await pool.query(`CREATE OR REPLACE FUNCTION pgcl_forced_failure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('pgcl.fail', true) = 'on' THEN
    RAISE EXCEPTION 'forced failure of % on %', TG_OP, TG_TABLE_NAME USING ERRCODE = 'P0001';
  END IF;
  RETURN NEW;
END $$`)
})
after(async () => {
  await pool.query(`DROP TABLE ${marks}`)
  await Promise.all([pool.end(), oldPool.end()])
})

type Shape = 'original' | 'outcome' | 'current'

/** A lease table of the given shape, with the failing trigger on it. */
async function tableOf(shape: Shape): Promise<string> {
  const table = `tx_${shape}_${randomBytes(4).toString('hex')}`
  if (shape === 'original') {
    await pool.query(`CREATE TABLE ${table} (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL,
      holder TEXT, claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`)
  } else {
    await pool.query(createTableSql(table))
    // The shape before pauses kept the claim's own end.
    if (shape === 'outcome') await pool.query(`ALTER TABLE ${table} DROP COLUMN claim_until`)
  }
  await pool.query(`CREATE TRIGGER forced BEFORE INSERT OR UPDATE ON ${table}
    FOR EACH ROW EXECUTE FUNCTION pgcl_forced_failure()`)
  return table
}

const failing = (client: pg.PoolClient, on: boolean) =>
  client.query(`SELECT set_config('pgcl.fail', $1, true)`, [on ? 'on' : 'off'])

/**
 * Runs `body` inside BEGIN … COMMIT on one client, after writing a mark of its own, and reports
 * whether the transaction was still whole: the next statement ran, and COMMIT committed the mark.
 */
async function inCallersTransaction(body: (client: pg.PoolClient) => Promise<void>, clients: pg.Pool = pool) {
  const mark = randomBytes(6).toString('hex')
  const client = await clients.connect()
  try {
    await client.query('BEGIN')
    await client.query(`INSERT INTO ${marks} VALUES ($1)`, [mark])
    await body(client)
    await failing(client, false)
    const next = await client.query('SELECT 1 AS one')
    const commit = await client.query('COMMIT')
    const kept = await pool.query(`SELECT count(*)::int AS n FROM ${marks} WHERE mark = $1`, [mark])
    return { next: next.rows[0].one, commit: commit.command, kept: kept.rows[0].n === 1 }
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  } finally {
    client.release()
  }
}

const whole = { next: 1, commit: 'COMMIT', kept: true }

/**
 * The client behind a plain wrapper that sees every statement text; it still reports the client's
 * transaction state, which is all the library reads to know it is inside one.
 */
function watch(client: pg.PoolClient, see: (text: string, sent: Promise<unknown>) => void) {
  return {
    query: (text: string, params?: unknown[]) => {
      const sent = client.query(text, params)
      see(text, sent)
      return sent
    },
    getTransactionStatus: () => (client as unknown as { getTransactionStatus(): string }).getTransactionStatus(),
  }
}

const DRIVERS = [
  { name: 'pg 8.23', clients: () => pool },
  { name: 'pg 8.20, without getTransactionStatus()', clients: () => oldPool },
]

for (const driver of DRIVERS)
  for (const shape of ['original', 'outcome', 'current'] as const) {
    describe(`a failing library statement leaves the caller's transaction whole (${shape} shape, ${driver.name})`, {
      timeout: 30_000,
    }, () => {
      let clients: pg.Pool
      before(() => {
        clients = driver.clients()
      })

      test('the claim fails: it rejects with the error, and the transaction goes on', async () => {
        const table = await tableOf(shape)
        const state = await inCallersTransaction(async (client) => {
          await failing(client, true)
          await assert.rejects(
            withCronLease(client, 'job', 60_000, () => 'ran', { table, logger: quiet }),
            /forced failure of INSERT/,
          )
        }, clients)
        assert.deepEqual(state, whole)
      })

      test('a renew fails: it rejects with the error, and the transaction goes on', async () => {
        const table = await tableOf(shape)
        const state = await inCallersTransaction(async (client) => {
          const outcome = await withCronLease(
            client,
            'job',
            60_000,
            async (ctx: LeaseContext) => {
              await failing(client, true)
              await assert.rejects(ctx.renew(30_000), /forced failure of UPDATE/)
              await failing(client, false)
              return 'ran'
            },
            { table, logger: quiet },
          )
          assert.deepEqual(outcome, { ran: true, result: 'ran' })
        }, clients)
        assert.deepEqual(state, whole)
      })

      test('keepAlive through the client is refused before the claim, with a TypeError, and the transaction goes on', async () => {
        const table = await tableOf(shape)
        const keepAlive = { beatMs: 50, extendMs: 60_000 }
        const refusal = (error: unknown) => {
          assert.ok(error instanceof TypeError)
          assert.match(
            error.message,
            /opts\.keepAlive cannot keep the lease for 'job' alive through a handle inside a transaction \(its transaction status is 'T'\): .*subtransaction.*pg_subtrans; pass the pool/,
          )
          return true
        }
        let ran = false
        const tick = () => {
          ran = true
        }
        const state = await inCallersTransaction(async (client) => {
          await assert.rejects(withCronLease(client, 'job', 60_000, tick, { table, logger: quiet, keepAlive }), refusal)
          await assert.rejects(
            catchUp(client, 'job', 60_000, tick, { table, logger: quiet, keepAlive, withinMs: 3_600_000 }),
            refusal,
          )
          const reported: unknown[] = []
          const onError = (error: unknown) => {
            reported.push(error)
          }
          await leasedTick(client, 'job', 60_000, tick, { table, logger: quiet, keepAlive, onError })()
          assert.equal(reported.length, 1, 'leasedTick hands the refusal to onError')
          refusal(reported[0])
        }, clients)
        assert.deepEqual(state, whole)
        assert.equal(ran, false, 'the tick did not run')
        const claimed = await pool.query(`SELECT count(*)::int AS n FROM ${quoteTable(table)}`)
        assert.equal(claimed.rows[0].n, 0, 'nothing was claimed')
      })

      test('the outcome record fails: the run resolves, and the claim and the tick commit', async () => {
        const table = await tableOf(shape)
        const state = await inCallersTransaction(async (client) => {
          const outcome = await withCronLease(
            client,
            'job',
            60_000,
            async () => {
              await client.query(`INSERT INTO ${marks} VALUES ('tick')`)
              await failing(client, true)
              return 'ran'
            },
            { table, logger: quiet },
          )
          assert.deepEqual(outcome, { ran: true, result: 'ran' })
        }, clients)
        assert.deepEqual(state, whole)
        const claimed = await pool.query(`SELECT count(*)::int AS n FROM ${quoteTable(table)} WHERE job_name = 'job'`)
        assert.equal(claimed.rows[0].n, 1, 'the claim committed')
      })

      test('pause, resume and release fail or are refused: each rejects, and the transaction goes on', async () => {
        const table = await tableOf(shape)
        await withCronLease(pool, 'job', 1, () => {}, { table, logger: quiet })
        const state = await inCallersTransaction(async (client) => {
          await failing(client, true)
          await assert.rejects(pauseJob(client, 'job', { table, forMs: 60_000 }))
          await assert.rejects(resumeJob(client, 'job', { table }))
          await assert.rejects(releaseLease(client, 'job', { table }), /forced failure of UPDATE/)
        }, clients)
        assert.deepEqual(state, whole)
      })
    })
  }

describe('a claim through a transaction client on a table of the original shape', () => {
  test('commits with the tick’s own writes, and nothing is sent that the table cannot take', async () => {
    const table = await tableOf('original')
    const warnings: string[] = []
    const sent: string[] = []
    const state = await inCallersTransaction(async (client) => {
      const watched = watch(client, (text) => sent.push(text))
      const outcome = await withCronLease(
        watched,
        'job',
        60_000,
        async () => {
          await client.query(`INSERT INTO ${marks} VALUES ('original-tick')`)
          return 'ran'
        },
        { table, logger: { warn: (m: string) => warnings.push(m) } },
      )
      assert.deepEqual(outcome, { ran: true, result: 'ran' })
    })
    assert.deepEqual(state, whole)
    assert.ok(
      !sent.some((text) => /last_outcome\s*=/.test(text)),
      'no outcome record is sent to a table without its columns',
    )
    assert.equal(warnings.length, 1)
    assert.match(warnings[0] ?? '', /original shape.*pg-cron-lease migrate --table tx_original_/)
    const ticked = await pool.query(`SELECT count(*)::int AS n FROM ${marks} WHERE mark = 'original-tick'`)
    assert.equal(ticked.rows[0].n, 1, 'the tick’s write committed')
  })
})

describe('two library calls in flight on one transaction client', () => {
  test('when one fails, the other is refused at most, and the transaction stays whole', async () => {
    const broken = await tableOf('current')
    const healthy = await tableOf('current')
    const state = await inCallersTransaction(async (client) => {
      await failing(client, true)
      const [claimed, listed] = await Promise.allSettled([
        withCronLease(client, 'job', 10_000, () => 'ran', { table: broken, logger: quiet }),
        listLeases(client, { table: healthy }),
      ])
      assert.equal(claimed.status, 'rejected')
      assert.match(String((claimed as PromiseRejectedResult).reason), /forced failure of INSERT/)
      // The second was queued behind the failure: refused with 25P02, or run after the rollback.
      if (listed.status === 'rejected') assert.equal((listed.reason as { code?: string }).code, '25P02')
    })
    assert.deepEqual(state, whole)
  })
})

describe('a pg before 8.21, which cannot say whether it is in a transaction', { timeout: 30_000 }, () => {
  /** A client of its own, so it starts with nothing learnt. */
  async function oldClient(): Promise<pg.Client> {
    const client = new pg820.Client({ connectionString: await testDatabaseUrl() })
    await client.connect()
    return client
  }

  test("a claim on a missing table inside BEGIN rejects with 42P01, and the caller's next statement runs", async () => {
    const client = await oldClient()
    try {
      assert.equal(typeof (client as { getTransactionStatus?: unknown }).getTransactionStatus, 'undefined')
      await client.query('BEGIN')
      await assert.rejects(
        withCronLease(client, 'job', 60_000, () => 'ran', { table: 'missing' }),
        { code: '42P01' },
      )
      assert.deepEqual((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }])
      assert.equal((await client.query('COMMIT')).command, 'COMMIT')
    } finally {
      await client.end()
    }
  })

  test('outside a transaction its claims go prepared, as on a newer pg; inside one, each under a savepoint', async () => {
    const table = await tableOf('current')
    const client = await oldClient()
    // What the library sends: a named statement as its name, plain text as itself.
    const sent: string[] = []
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>
    ;(client as unknown as { query: unknown }).query = (config: unknown, ...rest: unknown[]) => {
      sent.push(typeof config === 'string' ? config : `named ${(config as { text: string }).text.slice(0, 20)}`)
      return query(config, ...rest)
    }
    const seen = () => sent.splice(0).map((text) => text.split(/\s/)[0])
    try {
      await withCronLease(client, 'outside', 1, () => {}, { table, logger: quiet })
      assert.deepEqual(
        seen(),
        ['SAVEPOINT', 'SELECT', 'named', 'named', 'named'],
        'the first statement asks by a savepoint (refused: no transaction), then all goes prepared',
      )
      await withCronLease(client, 'outside', 1, () => {}, { table, logger: quiet })
      assert.ok(
        seen().every((word) => word === 'named'),
        'the state is known from then on: no savepoint',
      )
      await client.query('BEGIN')
      await failing(client as pg.PoolClient, true)
      sent.length = 0
      await assert.rejects(
        withCronLease(client, 'inside', 60_000, () => {}, { table, logger: quiet }),
        /forced failure/,
      )
      assert.ok(seen().includes('ROLLBACK'), 'the failed claim was rolled back to its savepoint')
      await failing(client as pg.PoolClient, false)
      assert.deepEqual((await client.query('SELECT 1 AS one')).rows, [{ one: 1 }], 'the transaction is whole')
      await client.query('COMMIT')
      sent.length = 0
      assert.equal((await withCronLease(client, 'after', 60_000, () => 'ran', { table, logger: quiet })).ran, true)
      assert.ok(
        seen().every((word) => word === 'named'),
        'after COMMIT it is outside a transaction again',
      )
    } finally {
      await client.end()
    }
  })
})
