/**
 * The NestJS subpath with real Nest applications on real Postgres: two applications, each with
 * ScheduleModule.forRoot() and its own pool, run a leased per-second @Cron once per occurrence and
 * a leased @Interval once per interval; a replica whose event loop was blocked past a whole
 * interval does not run the slot again; shutdown waits for the tick in flight, and the pool ends
 * cleanly after it; the health indicator gives the verdict of `pg-cron-lease check`; forRootAsync
 * takes its pool from an injected config service; catch-up runs a missed occurrence once at start.
 */
import 'reflect-metadata'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { after, before, describe, test } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import { Inject, Injectable, Module } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule'
import { HealthCheckService, TerminusModule } from '@nestjs/terminus'
import pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { type LeaseContext, withCronLease } from '../../../src/index.ts'
import { Leased, PgCronLeaseHealthIndicator, PgCronLeaseModule } from '../../../src/nestjs/index.ts'
import { finished } from '../../helpers/child.ts'
import { NESTJS_FLAGS, NESTJS_MAJOR } from '../../helpers/nestjs-major.ts'

let pool: pg.Pool
before(async () => {
  pool = await testPool()
})
after(async () => {
  await pool.end()
})

/** A fresh table of runs: (job, holder, occurrence, at), stamped by the database. */
async function runsTable(): Promise<string> {
  const table = `nest_runs_${Math.random().toString(16).slice(2, 10)}`
  await pool.query(
    `CREATE TABLE "${table}" (job text NOT NULL, holder text NOT NULL, occurrence timestamptz, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
  )
  return table
}

/** Where the leased methods of the test applications record their runs, set per test. */
let runs = ''
const record = (db: pg.Pool, ctx: LeaseContext) =>
  db.query(`INSERT INTO "${runs}" (job, holder, occurrence) VALUES ($1, $2, $3)`, [
    ctx.jobName,
    ctx.holder,
    ctx.occurrence,
  ])

const PG_POOL = Symbol('PG_POOL')

@Injectable()
class Jobs {
  constructor(@Inject(PG_POOL) private readonly db: pg.Pool) {}

  @Cron('* * * * * *', { name: 'nest:cron' })
  @Leased()
  async everySecond(ctx: LeaseContext) {
    await record(this.db, ctx)
  }

  @Interval(1000)
  @Leased()
  async everyInterval(ctx: LeaseContext) {
    await record(this.db, ctx)
  }
}

/** One application on its own pool, leasing on `table` as `holder`. */
async function startApp(
  providers: (new (...args: never[]) => object)[],
  table: string,
  holder: string,
  options: { shutdownTimeoutMs?: number } = {},
) {
  const db = await testPool({ max: 4 }, 2)
  @Module({
    imports: [ScheduleModule.forRoot(), PgCronLeaseModule.forRoot({ db, table, holder, ...options })],
    providers: [...providers, { provide: PG_POOL, useValue: db }],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] })
  return {
    app,
    db,
    async stop() {
      await app.close()
      await db.end()
    },
  }
}

describe('two Nest applications: each occurrence runs exactly once across both', () => {
  test('a per-second @Cron, 20 occurrences, each run once, and an @Interval once per interval', {
    timeout: 60_000,
  }, async () => {
    const table = await freshTable(pool, 'nest')
    runs = await runsTable()
    const apps = [await startApp([Jobs], table, 'app-a'), await startApp([Jobs], table, 'app-b')]
    // Counted from the second after both are up: starting an application holds the event loop
    // of the process, and a fire held past its whole interval names the later slot, by design.
    const from = Math.ceil(Date.now() / 1000) * 1000 + 1000
    try {
      await delay(from - Date.now() + 20_500)
    } finally {
      await Promise.all(apps.map((a) => a.stop()))
    }
    const cron = await pool.query(
      `SELECT (extract(epoch FROM occurrence) * 1000)::float8 AS ms, count(*)::int AS n, min(holder) AS holder
         FROM "${runs}" WHERE job = 'nest:cron' AND occurrence >= $1 GROUP BY occurrence ORDER BY occurrence`,
      [new Date(from)],
    )
    const occurrences = cron.rows.map((r) => Number(r.ms))
    const detail = JSON.stringify(cron.rows)
    assert.ok(occurrences.length >= 20, `at least 20 occurrences: ${detail}`)
    assert.deepEqual(
      cron.rows.filter((r) => r.n !== 1),
      [],
      `an occurrence run more than once: ${detail}`,
    )
    // Consecutive whole seconds: none missed, none that is not a slot of the schedule.
    assert.deepEqual(
      occurrences.filter((ms, i) => ms % 1000 !== 0 || (i > 0 && ms - occurrences[i - 1]! !== 1000)),
      [],
      detail,
    )

    // The interval names no occurrence: one run per interval, none two within half an interval.
    const interval = await pool.query(
      `SELECT occurrence, (extract(epoch FROM at) * 1000)::float8 AS ms FROM "${runs}" WHERE job = 'Jobs.everyInterval' AND at >= $1 ORDER BY at`,
      [new Date(from)],
    )
    const at = interval.rows.map((r) => Number(r.ms))
    const gaps = at.slice(1).map((ms, i) => Math.round(ms - at[i]!))
    assert.ok(at.length >= 19, `at least 19 interval runs: ${JSON.stringify(gaps)}`)
    assert.deepEqual(
      interval.rows.filter((r) => r.occurrence !== null),
      [],
    )
    assert.deepEqual(
      gaps.filter((gap) => gap < 500 || gap >= 1500),
      [],
      `one run per interval: ${JSON.stringify(gaps)}`,
    )
    const row = await pool.query(`SELECT every_ms FROM "${table}" WHERE job_name = 'Jobs.everyInterval'`)
    assert.equal(Number(row.rows[0].every_ms), 1000, 'the interval is declared')
  })
})

describe('a replica whose event loop is blocked past a whole interval', () => {
  test('fires late for a slot the other replica ran, and does not run it again', { timeout: 60_000 }, async () => {
    const table = await freshTable(pool, 'nest')
    runs = await runsTable()
    const child = spawn(process.execPath, ['--import', 'tsx', ...NESTJS_FLAGS, 'test/helpers/nest-replica.ts'], {
      env: {
        ...process.env,
        DATABASE_URL: await testDatabaseUrl(),
        LEASE_TABLE: table,
        RUNS_TABLE: runs,
        HOLDER: 'blocked',
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    const done = finished(child, { killAfterMs: 50_000 })
    const lines: Record<string, { at?: number; won?: boolean; from?: number; to?: number }>[] = []
    let buffered = ''
    child.stdout!.on('data', (chunk) => {
      buffered += chunk
      const parts = buffered.split('\n')
      buffered = parts.pop()!
      for (const line of parts) if (line.startsWith('{')) lines.push(JSON.parse(line))
    })
    const until = async (what: string, found: () => boolean) => {
      for (const deadline = Date.now() + 30_000; !found(); await delay(20)) {
        if (Date.now() > deadline) throw new Error(`not seen: ${what}: ${JSON.stringify(lines)}`)
      }
    }
    @Injectable()
    class OnTime {
      @Cron('* * * * * *', { name: 'nest:blocked' })
      @Leased()
      async tick(ctx: LeaseContext) {
        await record(pool, ctx)
      }
    }
    await until('the child is ready', () => lines.some((l) => 'ready' in l))
    const ready = lines.find((l) => 'ready' in l) as unknown as { nestjs: number }
    assert.equal(ready.nestjs, NESTJS_MAJOR, 'the replica runs the NestJS this suite runs')
    const onTime = await startApp([OnTime], table, 'on-time')
    try {
      await delay(3000)
      child.stdin!.write('block 1600\n')
      await until('the block ended', () => lines.some((l) => 'blocked' in l))
      await delay(3000)
    } finally {
      await onTime.stop()
      child.stdin!.end()
    }
    const { code, stderr } = await done
    assert.equal(code, 0, stderr)
    const blocked = lines.find((l) => 'blocked' in l)!.blocked!
    const claimsAfter = lines.filter((l) => l.claim && l.claim.at! >= blocked.to!).map((l) => l.claim!)
    assert.ok(claimsAfter.length > 0, `the blocked replica claimed again after the block: ${JSON.stringify(lines)}`)
    // Its first claim after the block is the late fire: its slot was run by the other replica.
    assert.equal(claimsAfter[0]!.won, false, JSON.stringify(lines))
    const { rows } = await pool.query(
      `SELECT occurrence, count(*)::int AS n, array_agg(holder) AS holders FROM "${runs}" GROUP BY occurrence HAVING count(*) > 1`,
    )
    assert.deepEqual(rows, [], 'no occurrence ran twice')
  })
})

describe('shutdown waits for the tick in flight, then the pool ends cleanly', () => {
  let release: () => void = () => {}
  let started: () => void = () => {}
  let finishedTick = false

  @Injectable()
  class Slow {
    constructor(@Inject(PG_POOL) private readonly db: pg.Pool) {}

    @Interval('nest:slow', 200)
    @Leased({ leaseMs: 5000 })
    async tick(ctx: LeaseContext) {
      started()
      await new Promise<void>((resolve) => {
        release = resolve
      })
      await record(this.db, ctx) // through the app's pool, after the shutdown began
      finishedTick = true
    }
  }

  test('app.close() resolves only after the tick settled; its outcome is recorded; pool.end() resolves', {
    timeout: 30_000,
  }, async () => {
    const table = await freshTable(pool, 'nest')
    runs = await runsTable()
    const tickStarted = new Promise<void>((resolve) => {
      started = resolve
    })
    const { app, db } = await startApp([Slow], table, 'slow')
    await tickStarted
    let closed = false
    const closing = app.close().then(() => {
      closed = true
    })
    await delay(500)
    assert.equal(closed, false, 'close waits for the tick')
    release()
    await closing
    assert.equal(finishedTick, true)
    await db.end()
    const { rows } = await pool.query(`SELECT last_outcome FROM "${table}" WHERE job_name = 'nest:slow'`)
    assert.equal(rows[0].last_outcome, 'ok')
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM "${runs}"`)).rows[0].n, 1)
  })
})

describe('shutdown past shutdownTimeoutMs aborts the tick, as drainLeases does, and the pool still ends', () => {
  let signal: AbortSignal | undefined
  let started: () => void = () => {}

  @Injectable()
  class Stuck {
    constructor(@Inject(PG_POOL) private readonly db: pg.Pool) {}

    // The fence pattern: a pool client held in a transaction until the tick is told to stop.
    @Interval('nest:stuck', 200)
    @Leased({ leaseMs: 60_000 })
    async tick(ctx: LeaseContext) {
      signal = ctx.signal
      const client = await this.db.connect()
      try {
        await client.query('BEGIN')
        await ctx.fence(client)
        started()
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))
        await client.query('ROLLBACK')
      } finally {
        client.release()
      }
    }
  }

  test('app.close() aborts ctx.signal at shutdownTimeoutMs; the run is recorded as an error; pool.end() resolves', {
    timeout: 30_000,
  }, async () => {
    const table = await freshTable(pool, 'nest')
    const tickStarted = new Promise<void>((resolve) => {
      started = resolve
    })
    const { app, db } = await startApp([Stuck], table, 'stuck', { shutdownTimeoutMs: 500 })
    await tickStarted
    await app.close()
    assert.equal(signal?.aborted, true, 'the tick was told')
    assert.match((signal.reason as Error).message, /shutting down: .*'nest:stuck'.*shutdownTimeoutMs \(500 ms\)/)
    await db.end()
    const { rows } = await pool.query(`SELECT last_outcome, last_error FROM "${table}" WHERE job_name = 'nest:stuck'`)
    assert.equal(rows[0].last_outcome, 'error')
    assert.match(rows[0].last_error, /the process is shutting down/)
  })
})

describe('the health indicator: the verdict of pg-cron-lease check, through Terminus', () => {
  @Injectable()
  class ConfigService {
    get(key: string): string | undefined {
      return key === 'DATABASE_URL' ? process.env.DATABASE_URL : undefined
    }
  }
  @Module({ providers: [ConfigService], exports: [ConfigService] })
  class ConfigModule {}

  test('forRootAsync takes its pool from ConfigService; down for an overdue and a failed job, up otherwise', {
    timeout: 30_000,
  }, async () => {
    const table = await freshTable(pool, 'nest')
    // Due a second after its claim, with a grace of one interval: overdue two seconds on.
    await withCronLease(pool, 'late', 800, () => {}, { table, everyMs: 1000 })
    await withCronLease(pool, 'ok', 1000, () => {}, { table })
    await assert.rejects(
      withCronLease(
        pool,
        'failing',
        1000,
        () => {
          throw new Error('boom')
        },
        { table },
      ),
    )
    await delay(2500)
    let made: pg.Pool | undefined
    @Module({
      imports: [
        TerminusModule,
        PgCronLeaseModule.forRootAsync({
          imports: [ConfigModule],
          inject: [ConfigService],
          useFactory: (config: ConfigService) => {
            made = new pg.Pool({ connectionString: config.get('DATABASE_URL'), max: 2 })
            return { db: made, table, migrate: true }
          },
        }),
      ],
    })
    class HealthModule {}
    const app = await NestFactory.createApplicationContext(HealthModule, { logger: false })
    try {
      const indicator = app.get(PgCronLeaseHealthIndicator)
      const all = await indicator.isHealthy('jobs')
      assert.equal(all.jobs!.status, 'down')
      assert.deepEqual(all.jobs!.jobs, ['failing', 'late'])
      assert.match(all.jobs!.reasons.failing, /^FAILING: last run failed .*Error: boom/)
      assert.match(all.jobs!.reasons.late, /^OVERDUE: due /)
      assert.deepEqual(await indicator.isHealthy('jobs', ['ok']), { jobs: { status: 'up', checked: 1 } })
      assert.deepEqual(await indicator.isHealthy('jobs', { jobs: (name) => name !== 'failing' && name !== 'late' }), {
        jobs: { status: 'up', checked: 1 },
      })
      const never = await indicator.isHealthy('jobs', ['ok', 'typo'])
      assert.deepEqual([never.jobs!.status, never.jobs!.jobs], ['down', ['typo']])
      // Through Terminus's own HealthCheckService: a down indicator is a 503.
      const health = app.get(HealthCheckService)
      assert.equal((await health.check([() => indicator.isHealthy('jobs', ['ok'])])).status, 'ok')
      await assert.rejects(health.check([() => indicator.isHealthy('jobs')]), { name: 'ServiceUnavailableException' })
    } finally {
      await app.close()
      await made?.end()
    }
  })
})

describe('catch-up: a missed occurrence runs once at start', () => {
  @Injectable()
  class Hourly {
    constructor(@Inject(PG_POOL) private readonly db: pg.Pool) {}

    @Interval('nest:catch-up', 3_600_000)
    @Leased({ catchUp: { withinMs: 7_200_000 } })
    async sync(ctx: LeaseContext) {
      await record(this.db, ctx)
    }
  }

  test('two applications start after the job fell due unclaimed: one runs it, once', { timeout: 30_000 }, async () => {
    const table = await freshTable(pool, 'nest')
    runs = await runsTable()
    // As a stopped fleet leaves the row: it last ran an hour and a half ago, for the occurrence
    // then, and was due an hour later, half an hour ago.
    await withCronLease(pool, 'nest:catch-up', 1000, () => {}, { table, everyMs: 3_600_000 })
    await pool.query(
      `UPDATE "${table}" SET claimed_at = clock_timestamp() - interval '90 minutes',
         last_occurrence = clock_timestamp() - interval '90 minutes', next_due_at = clock_timestamp() - interval '30 minutes',
         lease_until = clock_timestamp() - interval '1 second'
       WHERE job_name = 'nest:catch-up'`,
    )
    const apps = await Promise.all([startApp([Hourly], table, 'a'), startApp([Hourly], table, 'b')])
    try {
      for (const deadline = Date.now() + 10_000; ; await delay(50)) {
        const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${runs}"`)
        if (rows[0].n > 0 || Date.now() > deadline) break
      }
      await delay(500)
    } finally {
      await Promise.all(apps.map((a) => a.stop()))
    }
    const { rows } = await pool.query(`SELECT job, holder FROM "${runs}"`)
    assert.equal(rows.length, 1, JSON.stringify(rows))
    assert.equal(rows[0].job, 'nest:catch-up')
  })
})
