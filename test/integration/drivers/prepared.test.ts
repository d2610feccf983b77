/**
 * Prepared statements: with `pg` the probe, the claim, the renew and the keep-alive beat go as named
 * prepared statements, parsed and planned once per connection. Every other driver, `prepare: false`,
 * and a client inside a transaction get plain `query(text, params)`. A refusal of the prepared form
 * (a pooler that lost it, a `DEALLOCATE`) is retried at once as plain text and never reaches the
 * caller, and PgBouncer before 1.21 in transaction mode is the long proof of that.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import diagnostics from 'node:diagnostics_channel'
import { after, before, describe, test } from 'node:test'
import { PGlite } from '@electric-sql/pglite'
import pg from 'pg'
import postgres from 'postgres'
import { type PgBouncer, pgbouncerMissing, pgbouncerVersion, startPgBouncer } from '../../../dev/pgbouncer.ts'
import { CI, expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { race } from '../../../dev/race.ts'
import { handleState } from '../../../src/handle.ts'
import {
  CHANNELS,
  createTableSql,
  fromPostgresJs,
  type LeasedTickOptions,
  type LeaseOptions,
  leaseCoordinator,
  leasedTick,
  type Queryable,
  quoteTable,
  type RenewMessage,
  withCronLease,
} from '../../../src/index.ts'
import { claimSql, probeSql, recordRunSql, renewSql } from '../../../src/sql.ts'
import { finished } from '../../helpers/child.ts'
import { runsTable } from '../../helpers/occurrences.ts'
import type { ReplicaReport } from '../../helpers/prepared-replica.ts'

const HOUR = 3_600_000
const BEAT = { beatMs: 5, extendMs: 20_000 }
let admin: pg.Pool
let table: string
let jobs = 0
const nextJob = () => `prepared-${++jobs}`

before(async () => {
  admin = await testPool({ max: 3 })
  table = await freshTable(admin, 'prepared')
})
after(async () => {
  await admin.end()
})

/** The statements the session behind `db` has prepared at protocol level, as their texts, sorted. */
async function preparedTexts(db: pg.Pool | pg.Client): Promise<string[]> {
  const { rows } = await db.query(
    `SELECT name, statement FROM pg_prepared_statements WHERE NOT from_sql ORDER BY statement COLLATE "C"`,
  )
  for (const { name } of rows) assert.match(name, /^pg_cron_lease_[0-9a-f]{24}$/, 'named for the library')
  return rows.map((r) => r.statement)
}

/**
 * What a connection holds after {@link claimRenewBeatLose}: four texts, not five, as the beat sends
 * the renew's text, and the loss stops at the probe the win had already prepared.
 */
const hot = (t: string) => [probeSql(t), claimSql(t, 'history'), recordRunSql(t), renewSql(t, 'current')].sort()
/** What a connection holds after a job's first won claim: the probe that found the lease free, the claim, its record. */
const afterFirstWin = (t: string) => [probeSql(t), claimSql(t, 'history'), recordRunSql(t)].sort()
/** And after more: the same three, as every run is recorded by one text. */
const afterWins = afterFirstWin

/** Resolves at the next keep-alive beat of `jobName` that renewed (bounded). */
function nextBeat(jobName: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onRenew = (message: unknown) => {
      const m = message as RenewMessage
      if (m.jobName !== jobName || m.ms !== BEAT.extendMs || !m.renewed) return
      done()
      resolve()
    }
    const timer = setTimeout(() => {
      done()
      reject(new Error(`no keep-alive beat of '${jobName}' within 5 s`))
    }, 5000)
    const done = () => {
      clearTimeout(timer)
      diagnostics.unsubscribe(CHANNELS.renew, onRenew)
    }
    diagnostics.subscribe(CHANNELS.renew, onRenew)
  })
}

/**
 * One won claim on `db` whose tick renews and waits for a keep-alive beat, then one lost claim of
 * the same job: every hot statement is sent at least once.
 */
async function claimRenewBeatLose(db: Queryable, t: string, opts: LeaseOptions = {}): Promise<void> {
  const job = nextJob()
  const won = await withCronLease(
    db,
    job,
    HOUR,
    async (ctx) => {
      const beat = nextBeat(job)
      assert.equal(await ctx.renew(), true)
      await beat
      return 'ran'
    },
    { table: t, keepAlive: BEAT, ...opts },
  )
  assert.deepEqual(won, { ran: true, result: 'ran' })
  assert.deepEqual(await withCronLease(db, job, HOUR, () => 'twice', { table: t, ...opts }), {
    ran: false,
    result: null,
  })
}

describe('with pg and the default options, the hot statements are prepared', () => {
  test('a Pool: after a claim, a renew, a beat and a loss, its connection holds four statements: probe, claim, renew, record', async () => {
    const pool = await testPool({ max: 1 })
    try {
      await claimRenewBeatLose(pool, table)
      assert.deepEqual(await preparedTexts(pool), hot(table))
      assert.equal(handleState(pool).unprepared, false)
    } finally {
      await pool.end()
    }
  })

  test('a Client and a PoolClient: the same, on their own sessions', async () => {
    const client = new pg.Client({ connectionString: await testDatabaseUrl() })
    await client.connect()
    const pool = await testPool({ max: 1 })
    const checkedOut = await pool.connect()
    try {
      for (const db of [client, checkedOut]) {
        await claimRenewBeatLose(db, table)
        assert.deepEqual(await preparedTexts(db), hot(table))
      }
    } finally {
      checkedOut.release()
      await pool.end()
      await client.end()
    }
  })

  test('ten Clients racing 100 occurrences with prepared claims: exactly one wins each', async () => {
    const clients = Array.from(
      { length: 10 },
      () => new pg.Client({ connectionString: admin.options.connectionString }),
    )
    try {
      await Promise.all(clients.map((c) => c.connect()))
      const raceTable = await freshTable(admin, 'prepared_race')
      const report = await race({ claimants: clients, table: raceTable, jobName: 'prepared-race', rounds: 100 })
      assert.deepEqual(report, { rounds: 100, single: 100, none: 0, violations: 0 })
      for (const c of clients) {
        const texts = await preparedTexts(c)
        assert.ok(texts.includes(probeSql(raceTable)), 'each claimant sent the prepared probe')
        // A probe that finds the lease held stops the claim, but every round starts with it expired:
        // in 100 rounds each claimant found it free at least once.
        assert.ok(texts.includes(claimSql(raceTable, 'history')), 'each claimant sent the prepared claim')
        assert.ok(
          texts.every((text) => afterWins(raceTable).includes(text)),
          'and, having won, the outcome record',
        )
        assert.equal(handleState(c).unprepared, false)
      }
      await admin.query(`DROP TABLE ${quoteTable(raceTable)}`)
    } finally {
      await Promise.all(clients.map((c) => c.end()))
    }
  })

  test('prepare: false on withCronLease, leasedTick and leaseCoordinator: nothing is prepared', async () => {
    const pool = await testPool({ max: 1 })
    try {
      await claimRenewBeatLose(pool, table, { prepare: false })
      // The option is accepted at run time; the declared LeasedTickOptions type does not list it.
      const tickOptions = { table, prepare: false } as LeasedTickOptions
      const tick = leasedTick(pool, nextJob(), HOUR, async (ctx) => ctx.renew(), tickOptions)
      assert.deepEqual(await tick(), { ran: true, result: true })
      const coordinator = leaseCoordinator(pool, { table, prepare: false })
      assert.equal(await coordinator.shouldRun(`${nextJob()}:2026-11-30T12:00:00.000Z`, HOUR), true)
      assert.deepEqual(await preparedTexts(pool), [])
    } finally {
      await pool.end()
    }
  })

  test('a client inside a transaction is sent plain text, and its claim commits with the transaction', async () => {
    const pool = await testPool({ max: 1 })
    const client = await pool.connect()
    try {
      const job = nextJob()
      await client.query('BEGIN')
      const outcome = await withCronLease(client, job, HOUR, (ctx) => ctx.renew(), { table })
      assert.deepEqual(outcome, { ran: true, result: true })
      assert.deepEqual(await preparedTexts(client), [])
      await client.query('COMMIT')
      const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${quoteTable(table)} WHERE job_name = $1`, [
        job,
      ])
      assert.equal(rows[0].n, 1)
    } finally {
      client.release()
      await pool.end()
    }
  })
})

describe('drivers other than pg are only ever called as query(text, params)', () => {
  /** Wraps `db.query` to record every call's arguments; the calls still reach the driver. */
  function recording<D extends { query: (...args: any[]) => any }>(db: D): { db: D; calls: unknown[][] } {
    const calls: unknown[][] = []
    const query = db.query.bind(db)
    Object.defineProperty(db, 'query', {
      value: (...args: unknown[]) => {
        calls.push(args)
        return query(...args)
      },
    })
    return { db, calls }
  }

  function assertPlainCalls(calls: unknown[][], label: string): void {
    assert.ok(calls.length >= 4, `${label}: the claim, renew, beat and losing claim went through it`)
    for (const args of calls) {
      assert.equal(args.length, 2, `${label}: called with exactly (text, params)`)
      assert.equal(typeof args[0], 'string', `${label}: the text is a string, not a named statement`)
      assert.ok(Array.isArray(args[1]), `${label}: the parameters are an array`)
    }
  }

  test('a wrapper object around a pg Pool: plain calls, and the pool behind it prepares nothing', async () => {
    const pool = await testPool({ max: 1 })
    try {
      const { db, calls } = recording({ query: (text: string, params: unknown[]) => pool.query(text, params) })
      await claimRenewBeatLose(db, table)
      assertPlainCalls(calls, 'the wrapper')
      assert.deepEqual(await preparedTexts(pool), [])
    } finally {
      await pool.end()
    }
  })

  test('PGlite: plain calls on the instance itself', async () => {
    const pglite = new PGlite()
    try {
      // PGlite reads its type catalogue through its own query() while it starts: not our calls.
      await pglite.exec(createTableSql(table))
      const { db, calls } = recording(pglite)
      await claimRenewBeatLose(db, table)
      assertPlainCalls(calls, 'PGlite')
    } finally {
      await pglite.close()
    }
  })

  test('fromPostgresJs: plain calls on the adapter', async () => {
    const sql = postgres(await testDatabaseUrl(), { max: 1, onnotice: () => {} })
    try {
      const { db, calls } = recording(fromPostgresJs(sql))
      await claimRenewBeatLose(db, table)
      assertPlainCalls(calls, 'fromPostgresJs')
    } finally {
      await sql.end({ timeout: 5 })
    }
  })
})

describe('a refused prepared statement on a direct connection is retried as plain text', () => {
  for (const first of ['a winning claim', 'a losing claim'] as const) {
    test(`DEALLOCATE ALL under a Client, then ${first}: the right outcome, no error, plain text from then on`, async () => {
      const client = new pg.Client({ connectionString: await testDatabaseUrl() })
      await client.connect()
      try {
        const held = nextJob()
        assert.equal((await withCronLease(client, held, HOUR, () => 1, { table })).ran, true)
        assert.deepEqual(await preparedTexts(client), afterFirstWin(table))
        // pg still believes the claim, the first statement of either call after a win, is prepared,
        // so it sends only Bind and Execute: the server answers 26000 (prepared statement does not exist).
        await client.query('DEALLOCATE ALL')
        const job = first === 'a winning claim' ? nextJob() : held
        const outcome = await withCronLease(client, job, HOUR, (ctx) => ctx.renew(), { table })
        assert.deepEqual(
          outcome,
          first === 'a winning claim' ? { ran: true, result: true } : { ran: false, result: null },
        )
        assert.equal(handleState(client).unprepared, true)
        await claimRenewBeatLose(client, table)
        assert.deepEqual(await preparedTexts(client), [], 'nothing was prepared after the fallback')
      } finally {
        await client.end()
      }
    })
  }

  test('DEALLOCATE ALL inside the tick, then renew(): the renew is retried and renews', async () => {
    const pool = await testPool({ max: 1 })
    try {
      await claimRenewBeatLose(pool, table)
      const outcome = await withCronLease(
        pool,
        nextJob(),
        HOUR,
        async (ctx) => {
          await pool.query('DEALLOCATE ALL')
          return ctx.renew()
        },
        { table },
      )
      assert.deepEqual(outcome, { ran: true, result: true })
      assert.equal(handleState(pool).unprepared, true)
    } finally {
      await pool.end()
    }
  })

  test('DDL between calls (a column added, the table dropped and created again) surfaces no error', async () => {
    const pool = await testPool({ max: 1 })
    const ddlTable = await freshTable(admin, 'prepared_ddl')
    const t = quoteTable(ddlTable)
    try {
      await claimRenewBeatLose(pool, ddlTable)
      for (const ddl of [
        `ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS note text`,
        `ALTER TABLE ${t} ALTER COLUMN holder TYPE varchar(200)`,
        `DROP TABLE ${t}; ${createTableSql(ddlTable)}`,
      ]) {
        await admin.query(ddl)
        await expireLease(admin, ddlTable)
        await claimRenewBeatLose(pool, ddlTable)
      }
      assert.equal(handleState(pool).unprepared, false, 'the server planned the statements again; nothing was refused')
    } finally {
      await admin.query(`DROP TABLE IF EXISTS ${t}`)
      await pool.end()
    }
  })
})

// Locally the PgBouncer cases may skip, and say why; under CI a missing PgBouncer is a failing test.
const missing = pgbouncerMissing()
if (missing !== null && CI) {
  test('PgBouncer is installed, as CI requires for the prepared-statement fallback', () => {
    assert.fail(`CI=true, and the PgBouncer cases cannot run: ${missing}`)
  })
}

describe('through PgBouncer in transaction mode, before 1.21 (no prepared statements)', {
  skip: missing ?? false,
}, () => {
  const version = pgbouncerVersion()
  const tracksPrepared = version !== null && (version[0] > 1 || version[1] >= 21)

  test('three processes, each a pool of four clients, 400 rounds of claims, renews and beats: no error, one winner per round, every process fell back', async () => {
    const PROCESSES = 3
    const CLIENTS = 4
    const ROUNDS = 400
    // Fewer server connections than one process has clients: a client that prepares the claim on
    // a server connection that already has it from another client meets 42P05 at the latest then.
    const bouncer: PgBouncer = await startPgBouncer(await testDatabaseUrl(), CLIENTS - 1)
    const leaseTable = await freshTable(admin, 'prepared_bouncer')
    const runs = await runsTable(admin)
    // Even rounds find the job's row with an expired lease (the update branch), odd rounds no row.
    await admin.query(
      `INSERT INTO ${quoteTable(leaseTable)} (job_name, lease_until, holder)
       SELECT 'round-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, $1::int - 1, 2) AS i`,
      [ROUNDS],
    )
    try {
      const children = Array.from({ length: PROCESSES }, (_, p) =>
        spawn(process.execPath, ['--import', 'tsx', 'test/helpers/prepared-replica.ts'], {
          env: {
            ...process.env,
            DATABASE_URL: bouncer.url,
            LEASE_TABLE: leaseTable,
            RUNS_TABLE: runs,
            HOLDER: `process-${p}`,
            ROUNDS: String(ROUNDS),
            CLIENTS: String(CLIENTS),
          },
          stdio: ['pipe', 'pipe', 'pipe'],
        }),
      )
      const done = children.map((child) => finished(child, { killAfterMs: 120_000 }))
      // Every process has its pool open before any starts its rounds, so the rounds overlap.
      await Promise.all(
        children.map(
          (child) =>
            new Promise<void>((resolve, reject) => {
              child.stdout!.on('data', (chunk: Buffer) => {
                if (chunk.toString().includes('"ready":true')) resolve()
              })
              child.once('exit', (code) => reject(new Error(`a replica exited (${code}) before it was ready`)))
            }),
        ),
      )
      for (const child of children) child.stdin!.end('go\n')
      const reports: ReplicaReport[] = []
      for (const { code, stdout, stderr } of await Promise.all(done)) {
        assert.equal(code, 0, stderr)
        reports.push(JSON.parse(stdout.trim().split('\n').at(-1)!))
      }

      for (const r of reports) {
        assert.deepEqual(r.errors, [], `${r.holder}: no claim, renew or tick error reached the caller`)
        assert.equal(r.claims, ROUNDS * CLIENTS)
        assert.equal(r.renewed, 2 * r.won, `${r.holder}: every winner's two renews renewed`)
        if (!tracksPrepared) assert.equal(r.unprepared, true, `${r.holder}: the pool fell back to plain statements`)
      }
      const { rows } = await admin.query(
        `SELECT split_part(holder, ':', 2)::int AS round, count(*)::int AS n FROM "${runs}" GROUP BY 1 ORDER BY 1`,
      )
      assert.deepEqual(
        rows,
        Array.from({ length: ROUNDS }, (_, round) => ({ round, n: 1 })),
        'exactly one run per round: no duplicate, no missed occurrence',
      )
      assert.equal(
        reports.reduce((n, r) => n + r.won, 0),
        ROUNDS,
      )
      const beatRounds = Math.ceil(ROUNDS / 3)
      assert.ok(reports.reduce((n, r) => n + r.beats, 0) >= beatRounds, 'every third round had a keep-alive beat')
    } finally {
      await admin.query(`DROP TABLE IF EXISTS ${quoteTable(leaseTable)}, "${runs}"`)
      await bouncer.stop()
    }
  })

  test('a client inside a transaction, on a server connection that already has the claim prepared: it wins and commits', async () => {
    // One server connection: whatever one client prepares, the next client's transaction runs there.
    const bouncer = await startPgBouncer(await testDatabaseUrl(), 1)
    const first = new pg.Client({ connectionString: bouncer.url })
    const second = new pg.Client({ connectionString: bouncer.url })
    try {
      await first.connect()
      await second.connect()
      assert.equal((await withCronLease(first, nextJob(), HOUR, () => 1, { table })).ran, true)
      const job = nextJob()
      await second.query('BEGIN')
      const outcome = await withCronLease(second, job, HOUR, (ctx) => ctx.renew(), { table })
      await second.query('COMMIT')
      assert.deepEqual(outcome, { ran: true, result: true })
      const { rows } = await admin.query(`SELECT holder FROM ${quoteTable(table)} WHERE job_name = $1`, [job])
      assert.equal(rows.length, 1, 'the claim committed')
    } finally {
      await first.end()
      await second.end()
      await bouncer.stop()
    }
  })
})
