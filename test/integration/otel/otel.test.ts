/**
 * pg-cron-lease/otel with the real OpenTelemetry SDK (in-memory exporters) and the real `pg`
 * instrumentation, on real Postgres: a span per run on every entry point with a `pg` query of the
 * tick as its child, one span for ten racing claimants, errors, lost leases and drain aborts as
 * status and events, unsubscribing, two instrumentations at once, and the metrics beside
 * `status --format prometheus`.
 */
import { meterProvider, metricExporter, metricReader, spans } from './setup.ts'
import 'reflect-metadata'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import diagnostics from 'node:diagnostics_channel'
import { after, before, describe, test } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { Inject, Injectable, Module } from '@nestjs/common'
import { NestFactory } from '@nestjs/core'
import { ScheduleModule, Timeout } from '@nestjs/schedule'
import { SpanStatusCode, trace } from '@opentelemetry/api'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import cron from 'node-cron'
import type pg from 'pg'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { drainGroup, runGroup } from '../../../src/drain.ts'
import {
  CHANNELS,
  catchUp,
  type LeaseContext,
  leaseCoordinator,
  leasedTick,
  quoteTable,
  releaseLease,
  withCronLease,
} from '../../../src/index.ts'
import { runConfig, runLease } from '../../../src/lease.ts'
import { Leased, PgCronLeaseModule } from '../../../src/nestjs/index.ts'
import { instrumentCronLeases, traceNodeCronTask } from '../../../src/otel/index.ts'
import { parseExposition } from '../../helpers/prometheus.ts'

const ROOT = fileURLToPath(new URL('../../..', import.meta.url))
const TOKEN = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/
const TICK_QUERY = 'SELECT $1::text AS job'

let pool: pg.Pool
let table: string
let stopMain: () => void
before(async () => {
  stopMain = instrumentCronLeases()
  pool = await testPool({ max: 12 })
  table = await freshTable(pool, 'otel')
})
after(async () => {
  stopMain()
  await pool.end()
})

/** The tick every entry point runs: one query through the instrumented pool. */
const tick = async (ctx: LeaseContext) => (await pool.query(TICK_QUERY, [ctx.jobName])).rows[0].job as string

const runSpans = (job: string) => spans.getFinishedSpans().filter((s) => s.name === `run ${job}`)
const childrenOf = (parent: ReadableSpan) =>
  spans.getFinishedSpans().filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId)

/** The one run span of `job`, its attributes and outcome checked, with the tick's `pg` query as its child. */
function assertRun(
  job: string,
  expected: { outcome: string; catchUp?: boolean; occurrence?: Date; pgChild?: boolean },
) {
  const found = runSpans(job)
  assert.equal(found.length, 1, `one span for ${job}: ${found.map((s) => s.name).join(', ')}`)
  const span = found[0]!
  const a = span.attributes
  assert.equal(a['pg_cron_lease.job'], job)
  assert.equal(typeof a['pg_cron_lease.holder'], 'string')
  assert.match(String(a['pg_cron_lease.claim_token']), TOKEN)
  assert.equal(typeof a['pg_cron_lease.missed'], 'number')
  assert.equal(a['pg_cron_lease.catch_up'], expected.catchUp ?? false)
  assert.equal(a['pg_cron_lease.outcome'], expected.outcome)
  if (expected.occurrence) assert.equal(a['pg_cron_lease.occurrence'], expected.occurrence.toISOString())
  if (expected.pgChild !== false) {
    const query = childrenOf(span).find((s) => s.attributes['db.query.text'] === TICK_QUERY)
    assert.ok(query, `the tick's pg query is a child of the run span of ${job}`)
    assert.equal(query.spanContext().traceId, span.spanContext().traceId)
  }
  return span
}

type Point = { attributes: Record<string, unknown>; value: any }
/** Every data point of metric `name` now, from the in-memory exporter. */
async function points(name: string): Promise<Point[]> {
  metricExporter.reset()
  await metricReader.forceFlush()
  const scopes = metricExporter.getMetrics().at(-1)?.scopeMetrics ?? []
  return scopes.flatMap((scope) =>
    scope.metrics.filter((m) => m.descriptor.name === name).flatMap((m) => m.dataPoints as Point[]),
  )
}
/** The sum of metric `name` over the points whose attributes include `match`. */
async function total(name: string, match: Record<string, unknown>): Promise<number> {
  const matching = (await points(name)).filter((p) => Object.entries(match).every(([k, v]) => p.attributes[k] === v))
  return matching.reduce((sum, p) => sum + (typeof p.value === 'number' ? p.value : p.value.sum), 0)
}

describe('one run on each entry point: one span with its attributes, the tick nested in it', () => {
  test('withCronLease', async () => {
    const occurrence = new Date(Math.floor(Date.now() / 1000) * 1000)
    assert.deepEqual(await withCronLease(pool, 'otel:with', 60_000, tick, { table, occurrence }), {
      ran: true,
      result: 'otel:with',
    })
    const span = assertRun('otel:with', { outcome: 'ok', occurrence })
    assert.equal(span.status.code, SpanStatusCode.UNSET)
    assert.equal(
      await total('pg_cron_lease.runs', { 'pg_cron_lease.job': 'otel:with', 'pg_cron_lease.outcome': 'ok' }),
      1,
    )
    const duration = await points('pg_cron_lease.run.duration')
    assert.equal(duration.find((p) => p.attributes['pg_cron_lease.job'] === 'otel:with')?.value.count, 1)
  })

  test('leasedTick', async () => {
    const run = leasedTick(pool, 'otel:tick', 60_000, tick, { table })
    const occurrence = new Date(Math.floor(Date.now() / 1000) * 1000)
    assert.deepEqual(await run({ occurrence }), { ran: true, result: 'otel:tick' })
    assertRun('otel:tick', { outcome: 'ok', occurrence })
  })

  test('catchUp: the span says catch_up and the occurrences missed', async () => {
    const job = 'otel:catchup'
    const every = 60_000
    const ranFor = new Date(Math.floor(Date.now() / 1000) * 1000 - 210_000)
    const first = await withCronLease(pool, job, 1000, () => {}, { table, occurrence: ranFor, everyMs: every })
    assert.equal(first.ran, true)
    // As if the fleet stopped after that run: its next due time passed 150 s ago, unclaimed.
    await pool.query(
      `UPDATE ${quoteTable(table)} SET claimed_at = $2::timestamptz, next_due_at = $2::timestamptz + interval '60 seconds',
         lease_until = clock_timestamp() - interval '1 second' WHERE job_name = $1`,
      [job, ranFor.toISOString()],
    )
    spans.reset()
    const outcome = await catchUp(pool, job, 60_000, tick, { table, withinMs: 10 * every, everyMs: every })
    assert.equal(outcome.ran, true)
    const span = assertRun(job, { outcome: 'ok', catchUp: true })
    assert.ok(Number(span.attributes['pg_cron_lease.missed']) >= 2, JSON.stringify(span.attributes))
  })

  test('the node-cron coordinator, with the task wrapped by traceNodeCronTask', { timeout: 10_000 }, async () => {
    const job = 'otel:node-cron'
    const coordinator = leaseCoordinator(pool, { table, leaseMs: 800 })
    let resolveRan: (at: Date) => void
    const ran = new Promise<Date>((resolve) => (resolveRan = resolve))
    const task = cron.schedule(
      '* * * * * *',
      traceNodeCronTask(async (context: { date: Date }) => {
        await pool.query(TICK_QUERY, [job])
        resolveRan(context.date)
      }),
      { name: job, distributed: true, runCoordinator: coordinator },
    )
    coordinator.watch(task)
    let slot: Date
    try {
      slot = await ran
    } finally {
      await task.stop()
    }
    for (let i = 0; i < 100 && runSpans(job).length === 0; i++) await delay(20)
    assertRun(job, { outcome: 'ok', occurrence: slot })
  })

  test('NestJS @Leased()', { timeout: 20_000 }, async () => {
    const job = 'otel:nest'
    const db = pool
    const PG = Symbol('PG')
    let done: () => void
    const ran = new Promise<void>((resolve) => (done = resolve))
    @Injectable()
    class Jobs {
      constructor(@Inject(PG) private readonly pg: typeof db) {}
      @Timeout(job, 20)
      @Leased()
      async once(ctx: LeaseContext) {
        await this.pg.query(TICK_QUERY, [ctx.jobName])
        done()
      }
    }
    @Module({
      imports: [ScheduleModule.forRoot(), PgCronLeaseModule.forRoot({ db, table, holder: 'nest' })],
      providers: [Jobs, { provide: PG, useValue: db }],
    })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] })
    try {
      await ran
    } finally {
      await app.close()
    }
    assertRun(job, { outcome: 'ok' })
  })
})

describe('races, failures, lost leases and shutdowns', () => {
  test('ten claimants racing one occurrence: one span, nine lost claims counted', async () => {
    const job = 'otel:race'
    const occurrence = new Date(Math.floor(Date.now() / 1000) * 1000)
    const outcomes = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        withCronLease(pool, job, 60_000, tick, { table, occurrence, holder: `r${i}` }),
      ),
    )
    assert.equal(outcomes.filter((o) => o.ran).length, 1)
    assertRun(job, { outcome: 'ok', occurrence })
    const claims = { 'pg_cron_lease.job': job }
    assert.equal(await total('pg_cron_lease.claims', { ...claims, 'pg_cron_lease.claim.result': 'lost' }), 9)
    assert.equal(await total('pg_cron_lease.claims', { ...claims, 'pg_cron_lease.claim.result': 'won' }), 1)
  })

  test('a run that throws: status ERROR, the exception recorded, outcome error', async () => {
    const job = 'otel:throws'
    const failing = async (ctx: LeaseContext) => {
      await tick(ctx)
      throw new RangeError('the report had no rows')
    }
    await assert.rejects(withCronLease(pool, job, 60_000, failing, { table }), /no rows/)
    const span = assertRun(job, { outcome: 'error' })
    assert.equal(span.status.code, SpanStatusCode.ERROR)
    assert.equal(span.status.message, 'the report had no rows')
    assert.equal(span.attributes['error.type'], 'RangeError')
    const exception = span.events.find((e) => e.name === 'exception')
    assert.equal(exception?.attributes?.['exception.message'], 'the report had no rows')
    assert.equal(await total('pg_cron_lease.runs', { 'pg_cron_lease.job': job, 'pg_cron_lease.outcome': 'error' }), 1)
  })

  test('a lease released while its tick runs: a lease_lost event, renewals as events, one lost lease counted', async () => {
    const job = 'otel:lost'
    const outcome = await withCronLease(
      pool,
      job,
      60_000,
      async (ctx) => {
        await tick(ctx)
        await ctx.renew()
        // Listened to first: a beat can notice the release before releaseLease returns.
        const aborted = new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))
        await releaseLease(pool, job, { table })
        await aborted
        return ctx.signal.reason.message as string
      },
      { table, keepAlive: { beatMs: 50, extendMs: 60_000 } },
    )
    assert.match(String(outcome.result), /released/)
    const span = assertRun(job, { outcome: 'ok' })
    const renewals = span.events.filter((e) => e.name === 'pg_cron_lease.renew')
    assert.equal(renewals[0]?.attributes?.['pg_cron_lease.renewed'], true)
    const lost = span.events.filter((e) => e.name === 'pg_cron_lease.lease_lost')
    assert.equal(lost.length, 1)
    assert.match(String(lost[0]?.attributes?.['pg_cron_lease.reason']), /released/)
    assert.equal(await total('pg_cron_lease.lost_leases', { 'pg_cron_lease.job': job }), 1)
  })

  test('a run aborted by a shutdown: a drain_abort event, status ERROR', async () => {
    const job = 'otel:drain'
    const group = runGroup()
    let started: () => void
    const running = new Promise<void>((resolve) => (started = resolve))
    const config = runConfig(
      'withCronLease',
      pool,
      job,
      60_000,
      async (ctx: LeaseContext) => {
        await tick(ctx)
        started()
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))
      },
      { table },
    )
    const run = runLease(config, config.slot, group)
    await running
    assert.deepEqual(await drainGroup(group, 0, 'the test'), [job])
    await assert.rejects(run, /shutting down/)
    const span = assertRun(job, { outcome: 'error' })
    const abort = span.events.find((e) => e.name === 'pg_cron_lease.drain_abort')
    assert.match(String(abort?.attributes?.['pg_cron_lease.reason']), /shutting down/)
    assert.equal(span.status.code, SpanStatusCode.ERROR)
  })
})

describe('subscriptions', () => {
  test('unsubscribing stops spans and metrics; subscribing again starts them', async () => {
    stopMain()
    try {
      for (const name of [CHANNELS.claim, CHANNELS.runStart, CHANNELS.runEnd, CHANNELS.lost, CHANNELS.drainAbort]) {
        assert.equal(diagnostics.hasSubscribers(name), false, name)
      }
      assert.equal(diagnostics.tracingChannel(CHANNELS.tick).hasSubscribers, false)
      assert.equal((await withCronLease(pool, 'otel:off', 60_000, tick, { table })).ran, true)
      assert.equal(runSpans('otel:off').length, 0)
      assert.equal(await total('pg_cron_lease.claims', { 'pg_cron_lease.job': 'otel:off' }), 0)
      assert.equal(await total('pg_cron_lease.runs', { 'pg_cron_lease.job': 'otel:off' }), 0)
    } finally {
      stopMain = instrumentCronLeases()
    }
    await expireLease(pool, table, 'otel:off')
    assert.equal((await withCronLease(pool, 'otel:off', 60_000, tick, { table })).ran, true)
    assertRun('otel:off', { outcome: 'ok' })
    assert.equal(await total('pg_cron_lease.runs', { 'pg_cron_lease.job': 'otel:off' }), 1)
  })

  test('two instrumentations at once, named or global providers: one span and one count per run', async () => {
    const job = 'otel:twice'
    const second = instrumentCronLeases()
    const third = instrumentCronLeases({ tracerProvider: trace.getTracerProvider(), meterProvider })
    try {
      assert.equal((await withCronLease(pool, job, 60_000, tick, { table })).ran, true)
    } finally {
      second()
      third()
    }
    assertRun(job, { outcome: 'ok' })
    assert.equal(await total('pg_cron_lease.claims', { 'pg_cron_lease.job': job }), 1)
    assert.equal(await total('pg_cron_lease.runs', { 'pg_cron_lease.job': job }), 1)
    // The first still counts once the others are gone.
    await expireLease(pool, table, job)
    assert.equal((await withCronLease(pool, job, 60_000, tick, { table })).ran, true)
    assert.equal(await total('pg_cron_lease.runs', { 'pg_cron_lease.job': job }), 2)
  })

  test('a bad option is a TypeError naming it, before anything is subscribed', () => {
    assert.throws(() => instrumentCronLeases({ tracer: {} } as never), /opts\.tracer must be left out/)
    assert.throws(
      () => instrumentCronLeases({ meterProvider: 42 } as never),
      /opts\.meterProvider must be a MeterProvider.*got 42/,
    )
    assert.throws(() => instrumentCronLeases('global' as never), /opts must be an object or undefined/)
  })
})

describe('the metrics agree with status --format prometheus', () => {
  test('missed occurrences, and the last run of a job run once: its duration and outcome', {
    timeout: 20_000,
  }, async () => {
    const own = await freshTable(pool, 'otelprom')
    const second = 1000
    const base = Math.floor(Date.now() / second) * second - 30 * second
    // Job a: three runs, with occurrences skipped between them; job b: one run, which fails.
    for (const [i, at] of [0, 4, 9].entries()) {
      if (i > 0) await expireLease(pool, own, 'prom:a')
      const ran = await withCronLease(pool, 'prom:a', 60_000, tick, {
        table: own,
        occurrence: new Date(base + at * second),
        everyMs: second,
      })
      assert.equal(ran.ran, true)
    }
    await assert.rejects(
      withCronLease(pool, 'prom:b', 60_000, () => Promise.reject(new Error('down')), { table: own }),
      /down/,
    )
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', 'src/cli.ts', 'status', '--table', own, '--format', 'prometheus'],
      { cwd: ROOT, env: { ...process.env, DATABASE_URL: await testDatabaseUrl() } },
    )
    const families = parseExposition(stdout)
    const sample = (family: string, job: string) =>
      families.get(family)?.samples.find((s) => s.labels.job_name === job)?.value
    for (const job of ['prom:a', 'prom:b']) {
      const missed = await total('pg_cron_lease.missed_occurrences', { 'pg_cron_lease.job': job })
      assert.equal(missed, sample('pg_cron_lease_missed_occurrences_total', job), `missed occurrences of ${job}`)
    }
    assert.ok(Number(sample('pg_cron_lease_missed_occurrences_total', 'prom:a')) >= 7, stdout)
    const seconds = await total('pg_cron_lease.run.duration', { 'pg_cron_lease.job': 'prom:b' })
    assert.ok(Math.abs(seconds - Number(sample('pg_cron_lease_last_duration_seconds', 'prom:b'))) < 1e-6)
    assert.equal(await total('pg_cron_lease.runs', { 'pg_cron_lease.job': 'prom:b', 'pg_cron_lease.outcome': 'ok' }), 0)
    assert.equal(sample('pg_cron_lease_last_outcome_ok', 'prom:b'), 0)
    assert.equal(await total('pg_cron_lease.runs', { 'pg_cron_lease.job': 'prom:a', 'pg_cron_lease.outcome': 'ok' }), 3)
    assert.equal(sample('pg_cron_lease_last_outcome_ok', 'prom:a'), 1)
  })
})
