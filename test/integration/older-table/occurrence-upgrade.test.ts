/**
 * Upgrading a table of the original shape while replicas claim with occurrences: before, the lease
 * alone decides (one warning per table and process, no error); `upgradeTableSql` runs while they
 * fire; once each process reads the shape again (at most a minute later) the occurrence keys are in
 * force, with no restart and no error; and a caller's transaction goes through all of it whole.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { expireLease, testPool } from '../../../dev/postgres.ts'
import { quoteTable, upgradeTableSql, withCronLease } from '../../../src/index.ts'
import { SHAPE_READ } from '../../../src/table-facts.ts'
import {
  asAnotherProcess,
  clockOffsetMs,
  collectingLogger,
  Fleet,
  fleetRunsTable,
  originalShapeTable,
  type Replica,
  sleep,
} from '../../helpers/occurrence-replicas.ts'

const INTERVAL_MS = 400
const LEASE_MS = 300
const JOB = 'upgrade:keyed'

let admin: pg.Pool
before(async () => {
  admin = await testPool()
})
after(() => admin.end())

/** Claims for `occurrence` from a replica of the fleet: whether its tick ran. */
async function claimFrom(replica: Replica, occurrence: number): Promise<boolean> {
  const { ran } = await withCronLease(replica.pool, JOB, LEASE_MS, () => {}, {
    table: replica.table,
    holder: replica.name,
    logger: replica.log.logger,
    occurrence: new Date(occurrence),
  })
  return ran
}

const shapeWarnings = (replica: Replica) => replica.log.warns.filter((w) => w.includes('pg-cron-lease migrate'))

describe('upgrading the table while replicas claim with occurrences', () => {
  test('lease alone before, keys in force once each process reads the shape again after the upgrade, no restart, no error', {
    timeout: 60_000,
  }, async (t) => {
    // A process reads the shape of a table that is not current again once a minute; here, a second.
    SHAPE_READ.everyMs = 1000
    t.after(() => {
      SHAPE_READ.everyMs = 60_000
    })
    const table = await originalShapeTable(admin, 'occupgrade')
    const runs = await fleetRunsTable(admin)
    const offset = await clockOffsetMs(admin)
    const fleet = new Fleet(
      {
        table,
        runs,
        jobs: [{ name: JOB, keyed: true }],
        intervalMs: INTERVAL_MS,
        leaseMs: LEASE_MS,
        lateMs: 3 * INTERVAL_MS,
        workMs: LEASE_MS,
      },
      offset,
    )
    try {
      // Two processes of two replicas each: each process learns the table's shape on its own.
      const past = fleet.currentSlot() - 100 * INTERVAL_MS
      const replicas = await Promise.all(
        ['a1', 'a2', 'b1', 'b2'].map((name) =>
          fleet.start(name, name.startsWith('a') ? table : asAnotherProcess(table)),
        ),
      )
      const [a1, a2, b1, b2] = replicas as [Replica, Replica, Replica, Replica]

      // On the original shape the lease alone decides: a late replica runs an occurrence again.
      assert.equal(await claimFrom(a1, past), true)
      await expireLease(admin, table, JOB)
      assert.equal(await claimFrom(b1, past), true, 'a late replica runs it again: no key to keep to')
      await expireLease(admin, table, JOB)
      assert.equal(await claimFrom(a2, past), true)
      await expireLease(admin, table, JOB)
      assert.equal(await claimFrom(b2, past + INTERVAL_MS), true)
      assert.equal(await claimFrom(a1, past + INTERVAL_MS), false, 'while the lease is held, nobody wins')
      for (const group of [
        [a1, a2],
        [b1, b2],
      ]) {
        const warned = group.flatMap(shapeWarnings)
        assert.equal(warned.length, 1, `one warning per table and process: ${JSON.stringify(warned)}`)
      }

      // The fleet fires every slot, late at random, and the table is upgraded in the middle.
      const first = fleet.currentSlot() + 2 * INTERVAL_MS
      const last = first + 15 * INTERVAL_MS
      for (const replica of replicas) fleet.schedule(replica, first, last)
      await sleep(first + 7 * INTERVAL_MS + offset - Date.now())
      await admin.query(upgradeTableSql(table))
      const upgradedAt = (await admin.query(`SELECT clock_timestamp()::text AS at`)).rows[0].at
      await sleep(last + 3 * INTERVAL_MS + offset - Date.now())
      await fleet.settle(15_000)

      const errors = fleet.fires.filter((f) => f.outcome === 'error').map((f) => String(f.error))
      assert.deepEqual(errors, [], 'no claim failed on the way')
      assert.deepEqual(
        replicas.map((r) => r.log.errors),
        [[], [], [], []],
      )
      for (const group of [
        [a1, a2],
        [b1, b2],
      ]) {
        assert.equal(group.flatMap(shapeWarnings).length, 1, 'no more warnings about the shape')
      }

      // From one read interval after the upgrade on, every run is of a later occurrence than the
      // one before it: each claim was keyed.
      const { rows } = await admin.query(
        `SELECT (extract(epoch FROM occurrence) * 1000)::float8 AS slot, holder FROM ${runs}
         WHERE claimed_at > $1::timestamptz + interval '1.1 seconds' ORDER BY claimed_at`,
        [upgradedAt],
      )
      const after = rows.map((r) => Number(r.slot))
      t.diagnostic(
        `${fleet.fires.filter((f) => f.tickAt !== undefined).length} runs, ${after.length} of them claimed after the upgrade`,
      )
      assert.ok(after.length >= 3, `runs claimed after the upgrade: ${after.length}`)
      const backwards = after.filter((slot, i) => i > 0 && slot <= after[i - 1]!)
      assert.deepEqual(backwards, [], `occurrences in claim order after the upgrade: ${JSON.stringify(after)}`)

      // Keyed now, in both processes: a late replica presenting the last occurrence that ran, or an
      // earlier one, does not run it.
      const { rows: lease } = await admin.query(
        `SELECT (extract(epoch FROM last_occurrence) * 1000)::float8 AS ms FROM ${quoteTable(table)} WHERE job_name = $1`,
        [JOB],
      )
      const lastRan = Number(lease[0].ms)
      assert.equal(lastRan, Math.max(...after))
      await expireLease(admin, table, JOB)
      for (const replica of replicas) {
        assert.equal(await claimFrom(replica, lastRan), false, `${replica.name}: the last occurrence that ran`)
        assert.equal(await claimFrom(replica, lastRan - INTERVAL_MS), false, `${replica.name}: an earlier one`)
      }
      assert.equal(await claimFrom(b1, lastRan + INTERVAL_MS), true, 'the next occurrence still runs')
    } finally {
      await fleet.end()
    }
  })

  test("inside a caller's transaction, before and after the upgrade: no error reaches it, and it commits", async () => {
    const table = await originalShapeTable(admin, 'occupgrade_tx')
    const marks = `occ_marks_${randomBytes(4).toString('hex')}`
    await admin.query(`CREATE TABLE ${marks} (mark text NOT NULL)`)
    const { logger, warns } = collectingLogger()
    const base = Math.floor(Date.now() / 60_000) * 60_000 - 30 * 60_000
    const claimIn = async (client: pg.PoolClient, occurrence: number) =>
      (
        await withCronLease(client, JOB, LEASE_MS, () => {}, {
          table,
          logger,
          holder: 'in-transaction',
          occurrence: new Date(occurrence),
        })
      ).ran

    /** Runs `body` in a transaction that writes a mark first; whether the mark committed. */
    const inTransaction = async (mark: string, body: (client: pg.PoolClient) => Promise<void>) => {
      const client = await admin.connect()
      try {
        await client.query('BEGIN')
        await client.query(`INSERT INTO ${marks} VALUES ($1)`, [mark])
        await body(client)
        assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1, 'the transaction still runs statements')
        assert.equal((await client.query('COMMIT')).command, 'COMMIT')
      } finally {
        // Closed, not returned: a failed assertion must not leave the pool a client inside a transaction.
        client.release(true)
      }
      const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${marks} WHERE mark = $1`, [mark])
      return rows[0].n === 1
    }

    // The original shape: the lease alone, and the claim commits with the caller's work.
    assert.equal(
      await inTransaction('before', async (client) => {
        assert.equal(await claimIn(client, base), true)
        assert.equal(await claimIn(client, base + 60_000), false, 'the lease is held')
      }),
      true,
    )
    await expireLease(admin, table, JOB)

    // The upgrade lands while a transaction is open that has not touched the lease table yet.
    assert.equal(
      await inTransaction('across', async (client) => {
        await admin.query(upgradeTableSql(table))
        assert.equal(await claimIn(client, base), true, 'no key was written before: the lease alone decided it')
        await client.query(
          `UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() - interval '1 second' WHERE job_name = $1`,
          [JOB],
        )
        assert.equal(await claimIn(client, base), false, 'its own win keyed the row')
        assert.equal(await claimIn(client, base + 60_000), true)
      }),
      true,
    )
    await expireLease(admin, table, JOB)

    assert.equal(
      await inTransaction('after', async (client) => {
        assert.equal(await claimIn(client, base + 60_000), false, 'the occurrence that ran')
        assert.equal(await claimIn(client, base + 120_000), true)
      }),
      true,
    )
    assert.equal(warns.filter((w) => w.includes('pg-cron-lease migrate')).length, 1, JSON.stringify(warns))
    await admin.query(`DROP TABLE ${marks}`)
  })
})
