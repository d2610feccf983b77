import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import pg from 'pg'
import { type PgBouncer, pgbouncerMissing, startPgBouncer } from '../../../dev/pgbouncer.ts'
import { CI, expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { race } from '../../../dev/race.ts'
import { assertCleanSoak } from '../../../dev/soak/assert.ts'
import { runSoak } from '../../../dev/soak/run.ts'
import { withCronLease } from '../../../src/index.ts'

// Locally the suite may skip, and says why; under CI a missing PgBouncer is a failing test.
const missing = pgbouncerMissing()

if (missing !== null && CI) {
  test('PgBouncer is installed, as CI requires for this suite', () => {
    assert.fail(`CI=true, and the PgBouncer suite cannot run: ${missing}`)
  })
}

describe('through PgBouncer in transaction pooling mode', { skip: missing ?? false }, () => {
  let bouncer: PgBouncer
  let admin: pg.Pool

  before(async () => {
    bouncer = await startPgBouncer(await testDatabaseUrl())
    admin = await testPool({ max: 2 })
  })

  after(async () => {
    await admin?.end()
    await bouncer?.stop()
  })

  test('ten claimants racing 200 occurrences: exactly one wins each', async () => {
    const clients = Array.from({ length: 10 }, () => new pg.Client({ connectionString: bouncer.url }))
    try {
      await Promise.all(clients.map((c) => c.connect()))
      const table = await freshTable(admin, 'bouncer_race')
      const report = await race({ claimants: clients, table, jobName: 'bouncer-race', rounds: 200 })
      assert.deepEqual(report, { rounds: 200, single: 200, none: 0, violations: 0 })
      await admin.query(`DROP TABLE "${table}"`)
    } finally {
      await Promise.all(clients.map((c) => c.end()))
    }
  })

  test('renew of your own lease resolves true; after another claim replaced it, false', async () => {
    const a = new pg.Pool({ connectionString: bouncer.url, max: 3 })
    const b = new pg.Pool({ connectionString: bouncer.url, max: 3 })
    // an idle client dropped as PgBouncer stops, after the test is over
    for (const pool of [a, b]) pool.on('error', () => {})
    try {
      const table = await freshTable(admin, 'bouncer_renew')
      for (const otherHolder of ['B', 'A']) {
        const outcome = await withCronLease(
          a,
          'fenced',
          60_000,
          async (ctx) => {
            assert.equal(await ctx.renew(), true, 'a renew of the lease this claim holds')
            assert.equal(await ctx.renew(30_000), true)
            await expireLease(admin, table)
            const other = await withCronLease(b, 'fenced', 60_000, () => 'other', { table, holder: otherHolder })
            assert.equal(other.ran, true, 'the expired lease was claimed again')
            assert.equal(await ctx.renew(), false, `renew after holder ${otherHolder} re-claimed`)
            assert.equal(ctx.signal.aborted, true)
            return 'done'
          },
          { table, holder: 'A' },
        )
        assert.deepEqual(outcome, { ran: true, result: 'done' })
        const { rows } = await admin.query(
          `SELECT lease_until > clock_timestamp() + interval '50 seconds' AS held FROM "${table}"`,
        )
        assert.equal(rows[0].held, true, 'the fenced-out renew did not touch the new claim')
        await expireLease(admin, table)
      }
      await admin.query(`DROP TABLE "${table}"`)
    } finally {
      await a.end()
      await b.end()
    }
  })

  test('the short soak through PgBouncer: no duplicate and no unexplained miss', async () => {
    const result = await runSoak({ url: bouncer.url, adminUrl: await testDatabaseUrl(), seconds: 16, replicas: 4 })
    assertCleanSoak(result)
  })
})
