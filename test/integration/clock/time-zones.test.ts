import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { listLeases, listRuns, withCronLease } from '../../../src/index.ts'
import { claim } from '../../../src/lease.ts'

// POSIX-form zones are the ones Postgres 18 lets redefine 'UTC' and 'Z' for the session; a named
// zone and odd output styles must not matter either.
const SESSIONS: Record<string, string[]> = {
  'POSIX UTC+3': ["SET TimeZone = 'UTC+3'"],
  'POSIX UTC-02': ["SET TimeZone = 'UTC-02'"],
  'POSIX UTC+12:30': ["SET TimeZone = 'UTC+12:30'"],
  'POSIX EST5EDT-like': ["SET TimeZone = 'XYZ5ABC'"],
  'named Asia/Kolkata': ["SET TimeZone = 'Asia/Kolkata'"],
  'SQL DateStyle, sql_standard intervals, India abbreviations, UTC-7': [
    "SET DateStyle = 'SQL, DMY'",
    "SET IntervalStyle = 'sql_standard'",
    "SET timezone_abbreviations = 'India'",
    "SET TimeZone = 'UTC-7'",
  ],
}

let admin: pg.Pool
let table: string
let job = 0

before(async () => {
  admin = await testPool()
  table = await freshTable(admin, 'zones')
})
after(() => admin.end())

/** A pool whose every connection starts with `settings`, given as connection options (`-c name=value`). */
async function poolWith(settings: string[]): Promise<pg.Pool> {
  // In the startup packet, not as queries on connect, which pg would queue behind the pool's first query.
  const parsed = settings.map((sql) => /^SET (\w+) = '(.*)'$/.exec(sql) ?? assert.fail(`a SET statement: ${sql}`))
  const options = parsed.map(([, name, value]) => `-c ${name}=${value!.replace(/[\\ ]/g, '\\$&')}`).join(' ')
  const pool = new pg.Pool({ connectionString: await testDatabaseUrl(), max: 3, options })
  for (const [, name, value] of parsed) {
    const { rows } = await pool.query('SELECT current_setting($1) AS value', [name])
    assert.equal(rows[0].value, value, `the session's ${name}`)
  }
  return pool
}

/** The claim's instant as the database holds it, in epoch microseconds: no text, no zone. */
async function claimedAtMicros(jobName: string): Promise<bigint> {
  const { rows } = await admin.query(
    `SELECT (extract(epoch FROM claimed_at) * 1000000)::bigint::text AS us FROM "${table}" WHERE job_name = $1`,
    [jobName],
  )
  return BigInt(rows[0].us)
}

/** Epoch microseconds of a token such as 2026-11-29T22:12:11.428993Z, computed in Node. */
function tokenMicros(token: string): bigint {
  const match = /^(.*\.)(\d{6})Z$/.exec(token)
  assert.ok(match, `microsecond UTC text: ${token}`)
  return BigInt(Date.parse(`${match[1]}000Z`)) * 1000n + BigInt(match[2]!)
}

describe('timestamps do not depend on the session time zone or styles', () => {
  for (const [name, settings] of Object.entries(SESSIONS)) {
    test(`${name}: the token is the true UTC instant, renew and keep-alive hold, listLeases agrees`, async () => {
      const pool = await poolWith(settings)
      try {
        const jobName = `zone-${++job}`
        let token: string | null = null
        let renewed: boolean | undefined
        let aborted = true
        const outcome = await withCronLease(
          pool,
          jobName,
          2000,
          async (ctx) => {
            token = ctx.claimToken
            await sleep(150) // two keep-alive beats land
            renewed = await ctx.renew(3000)
            aborted = ctx.signal.aborted
          },
          { table, keepAlive: { beatMs: 50, extendMs: 1000 } },
        )
        assert.equal(outcome.ran, true)
        assert.equal(renewed, true, 'renew still finds this claim')
        assert.equal(aborted, false, 'no beat found the lease gone')
        assert.equal(tokenMicros(token!), await claimedAtMicros(jobName), 'the token is the UTC instant, to the µs')
        const [lease] = (await listLeases(pool, { table })).filter((l) => l.jobName === jobName)
        assert.equal(lease!.claimedAt, token, 'listLeases().claimedAt === ctx.claimToken')
        const left = Date.parse(lease!.leaseUntil) - Date.parse(lease!.checkedAt)
        assert.ok(left > 2000 && left <= 3000, `leaseUntil - checkedAt is the renewed ${left} ms, not shifted`)
        assert.ok(Math.abs(Date.parse(lease!.checkedAt) - Date.now()) < 60_000, 'checkedAt is now, not hours off')
      } finally {
        await pool.end()
      }
    })
  }

  test('a role-level setting (ALTER ROLE … SET timezone) changes nothing either', async () => {
    const role = `zone_role_${randomBytes(4).toString('hex')}`
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'zone'`)
    await admin.query(`ALTER ROLE ${role} SET timezone = 'UTC+5'`)
    await admin.query(`GRANT SELECT, INSERT, UPDATE ON "${table}" TO ${role}`)
    const url = new URL(await testDatabaseUrl())
    url.username = role
    url.password = 'zone'
    const pool = new pg.Pool({ connectionString: url.href, max: 2 })
    try {
      assert.equal((await pool.query('SHOW TimeZone')).rows[0].TimeZone, 'UTC+5', 'the role setting applies')
      const jobName = `zone-${++job}`
      let token: string | null = null
      let renewed = false
      await withCronLease(
        pool,
        jobName,
        2000,
        async (ctx) => {
          token = ctx.claimToken
          renewed = await ctx.renew(2500)
        },
        { table },
      )
      assert.equal(renewed, true)
      assert.equal(tokenMicros(token!), await claimedAtMicros(jobName))
      const [lease] = (await listLeases(pool, { table })).filter((l) => l.jobName === jobName)
      assert.equal(lease!.claimedAt, token)
    } finally {
      await pool.end()
      await admin.query(`DROP OWNED BY ${role}`)
      await admin.query(`DROP ROLE ${role}`)
    }
  })
})

describe('the run history keeps the runs that died at their true instant, whatever zone kept or wrote them', () => {
  test('claims that die in POSIX-zone sessions, and a run that ends late in one, written by a session in another', async () => {
    const zones = Object.entries(SESSIONS).slice(0, 3)
    const pools = await Promise.all(zones.map(([, settings]) => poolWith(settings)))
    try {
      const jobName = `zone-${++job}`
      const tokens: string[] = []
      for (const [i, pool] of pools.entries()) {
        const ticket = await claim({
          db: pool,
          table,
          jobName,
          leaseMs: 1,
          holder: `dead-${i}`,
          logger: undefined,
          prepare: true,
          record: true,
        })
        assert.ok(ticket?.claimToken, `a claim in ${zones[i]![0]}`)
        tokens.push(ticket.claimToken)
        await expireLease(admin, table, jobName)
      }
      // The last to die ends after all, from its own zone, while the next claim (another zone) runs.
      let finish!: () => void
      const late = withCronLease(pools[0]!, jobName, 60_000, () => new Promise<void>((resolve) => (finish = resolve)), {
        table,
        holder: 'late',
      })
      for (let i = 0; i < 500 && finish === undefined; i++) await sleep(10)
      await expireLease(admin, table, jobName)
      let release!: () => void
      const next = withCronLease(
        pools[1]!,
        jobName,
        60_000,
        () => new Promise<void>((resolve) => (release = resolve)),
        {
          table,
          holder: 'next',
        },
      )
      for (let i = 0; i < 500 && release === undefined; i++) await sleep(10)
      finish()
      await late
      release()
      await next
      const runs = await listRuns(pools[2]!, { table, jobName })
      assert.deepEqual(
        runs.map((r) => [r.holder, r.outcome]),
        [
          ['next', 'ok'],
          ['late', 'ok'],
          ['dead-2', 'unfinished'],
          ['dead-1', 'unfinished'],
          ['dead-0', 'unfinished'],
        ],
      )
      assert.deepEqual(
        runs
          .slice(2)
          .map((r) => r.claimedAt)
          .reverse(),
        tokens,
        'each dead run at its claim token, to the µs',
      )
    } finally {
      await Promise.all(pools.map((pool) => pool.end()))
    }
  })
})
