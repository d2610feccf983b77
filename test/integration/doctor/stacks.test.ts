/**
 * `pg-cron-lease doctor` on the two stacks a user's URL can lead to by mistake or by design:
 * PgBouncer in transaction mode in front of the test server, and a real streaming standby (the
 * one the high-availability tests build, here asynchronous), with its primary. One PgBouncer and
 * one replica set for the whole file, started side by side.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { type PgBouncer, pgbouncerMissing, startPgBouncer } from '../../../dev/pgbouncer.ts'
import { CI, requestedMajor, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { createTableSql, historyTableOf, quoteTable } from '../../../src/index.ts'
import { doctorCli, doctorRows, leaseTableWithHistory, lines } from '../../helpers/doctor.ts'
import { queryOnce, type ReplicaSet, startReplicaSet } from '../../helpers/standby.ts'

const missing = pgbouncerMissing()

// Locally the PgBouncer case may skip, and says why; under CI a missing PgBouncer is a failing test.
if (missing !== null && CI) {
  test('PgBouncer is installed, as CI requires for this suite', () => {
    assert.fail(`CI=true, and the doctor's PgBouncer case cannot run: ${missing}`)
  })
}

const TABLE = 'cron_leases'

let admin: pg.Pool
let bouncer: PgBouncer | undefined
/** The same with a single server connection: a connection's statement waits for another's transaction. */
let narrow: PgBouncer | undefined
let set: ReplicaSet

before(async () => {
  admin = await testPool({ max: 2 })
  const url = await testDatabaseUrl()
  const replicas = startReplicaSet(requestedMajor() ?? 18, 'async').then(async (started) => {
    await queryOnce(started.primary.adminUrl, createTableSql(TABLE))
    await queryOnce(
      started.primary.adminUrl,
      `GRANT SELECT, INSERT, UPDATE, DELETE ON ${quoteTable(TABLE)}, ${quoteTable(historyTableOf(TABLE))} TO app`,
    )
    await started.waitForReplay()
    return started
  })
  const bouncing = missing === null ? startPgBouncer(url) : Promise.resolve(undefined)
  const narrowing = missing === null ? startPgBouncer(url, 1) : Promise.resolve(undefined)
  const [s, b, n] = await Promise.allSettled([replicas, bouncing, narrowing])
  if (s.status === 'fulfilled') set = s.value
  if (b.status === 'fulfilled') bouncer = b.value
  if (n.status === 'fulfilled') narrow = n.value
  const failed = [s, b, n].find((r) => r.status === 'rejected') as PromiseRejectedResult | undefined
  if (failed !== undefined) {
    await Promise.allSettled([set?.stop(), bouncer?.stop(), narrow?.stop()])
    throw failed.reason
  }
})

after(async () => {
  await admin?.end()
  await Promise.allSettled([bouncer?.stop(), narrow?.stop(), set?.stop()])
})

describe('behind PgBouncer in transaction mode', { skip: missing ?? false }, () => {
  test('pooler and prepared statements warn, every other check passes, the race too; exit 0; no row left', async () => {
    const table = await leaseTableWithHistory(admin, `doctor_bouncer_${process.pid}`)
    const run = await doctorCli(['--url', bouncer!.url, '--table', table])
    assert.equal(run.code, 0, run.stdout + run.stderr)
    const found = lines(run.stdout)
    const marks = Object.fromEntries([...found].map(([id, { mark }]) => [id, mark]))
    assert.deepEqual(marks, {
      connection: '✓',
      writable: '✓',
      table: '✓',
      privileges: '✓',
      clock: '✓',
      pooler: '!',
      prepared: '!',
      durability: '✓',
      timeouts: '✓',
      race: '✓',
    })
    assert.match(
      found.get('pooler')!.text,
      /^transaction pooling: .*fall back.*one backend.*docs\/drivers\.md#prepared-statements-and-pgbouncer\)$/,
    )
    assert.match(found.get('prepared')!.text, /refused here: the library falls back to unnamed ones/)
    assert.match(found.get('race')!.text, /^20 rounds of 10 connections, exactly one winner each/)
    assert.match(run.stdout, /\n10 checks: 8 passed, 2 warnings, 0 failures\n$/)
    assert.equal(await doctorRows(admin, table), 0)
  })

  test('with one server connection, the pooler check does not wait forever on itself: it warns, and the race passes', async () => {
    const table = await leaseTableWithHistory(admin, `doctor_narrow_${process.pid}`)
    const run = await doctorCli(['--url', narrow!.url, '--table', table, '--rounds', '5'])
    assert.equal(run.code, 0, run.stdout + run.stderr)
    const found = lines(run.stdout)
    assert.equal(found.get('pooler')!.mark, '!')
    assert.match(found.get('pooler')!.text, /waited for another connection's transaction/)
    assert.equal(found.get('race')!.mark, '✓')
    assert.equal(await doctorRows(admin, table), 0)
  })
})

describe('a hot standby, and its primary', () => {
  test('on the standby the writable check fails and the race is not run; exit 3; nothing was written', async () => {
    const run = await doctorCli(['--url', set.standby.url, '--table', TABLE])
    assert.equal(run.code, 3, run.stdout + run.stderr)
    const found = lines(run.stdout)
    assert.equal(found.get('writable')!.mark, '✗')
    assert.match(
      found.get('writable')!.text,
      /standby \(pg_is_in_recovery\(\) is true\): no replica can claim here; fix: point --url/,
    )
    assert.equal(found.get('race')!.mark, '✗')
    assert.match(found.get('race')!.text, /^not run: the writable check failed/)
    assert.equal(found.get('table')!.mark, '✓', 'the replicated table is current')
    const { rows } = await queryOnce(set.primary.adminUrl, `SELECT count(*)::int AS n FROM ${quoteTable(TABLE)}`)
    assert.equal(rows[0]?.n, 0)
  })

  test('on the primary of an asynchronous standby the durability check warns, naming the failover risk; exit 0', async () => {
    const run = await doctorCli(['--url', set.primary.url, '--table', TABLE, '--race', '3', '--rounds', '5'])
    assert.equal(run.code, 0, run.stdout + run.stderr)
    const found = lines(run.stdout)
    assert.equal(found.get('writable')!.mark, '✓')
    assert.equal(found.get('durability')!.mark, '!')
    assert.match(
      found.get('durability')!.text,
      /no synchronous standby: 1 standby\(s\) stream asynchronously, so a failover can lose a claim/,
    )
    assert.match(found.get('durability')!.text, /docs\/high-availability\.md#settings\)$/)
    assert.equal(found.get('race')!.mark, '✓')
    const { rows } = await queryOnce(set.primary.adminUrl, `SELECT count(*)::int AS n FROM ${quoteTable(TABLE)}`)
    assert.equal(rows[0]?.n, 0, 'the race deleted its row')
  })
})
