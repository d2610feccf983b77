/**
 * What `npm run bench` measures, each case written once: the single operations (the floor, the
 * library, the usual patterns, diagnostics), the same claim through PgBouncer, the claimant races,
 * the fleet round, and the connections held while a tick runs. Every case runs against a
 * {@link Bench}: the server, its connections and its tables, opened by {@link openBench}.
 */
import { randomBytes } from 'node:crypto'
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import { BatchSpanProcessor, InMemorySpanExporter } from '@opentelemetry/sdk-trace-base'
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node'
import pg from 'pg'
import type { Cleanups } from '../dev/lifecycle.ts'
import { advisoryTick, plainUpsertSql, shedLockClaim } from '../dev/peers.ts'
import type { Server } from '../dev/postgres.ts'
import { type Library, recordingPool, type SentStatement, sendAgain } from './library.ts'
import {
  backendCpu,
  type CpuMark,
  clockMs,
  cpuMsBetween,
  mark,
  percentile,
  Series,
  type Stats,
  serverCpu,
  spent,
} from './measure.ts'

/** How long each part runs. */
export interface Profile {
  /**
   * Calls of each single operation before anything is measured: in the full run, at least
   * WIN_JOBS, so every job of the winning cases has run once (a job's first run is recorded by the
   * record that numbers its runs from the history, sent once per job).
   */
  warmupOps: number
  /** How long the single operations are timed, round robin, one call of each case after another. */
  latencyMs: number
  /** Blocks of each single operation for its server work (xids, WAL, CPU), and their length. */
  workBlocks: number
  blockMs: number
  /** Blocks per race, and the race's whole time. */
  raceBlocks: number
  raceMs: number
  raceJobs: number
  fleetJobs: number
  fleetReplicas: number
  /** Fleet rounds per kind, alternating kinds; each kind's rounds are pooled. */
  fleetRounds: number
  /** Slices of the jobs two builds' rounds claim in turns (fleetRoundsInTurns). */
  fleetSlices: number
  /** Runs of the one job whose history write is timed early and late (see historyWrite), and its late window. */
  historyRuns: number
  historyWindow: number
  /** Rounds of the losing claim with pg-cron-lease/otel off, on and off again (see otelRounds), and their blocks' length. */
  otelRounds: number
  otelBlockMs: number
}

export const PROFILES: Record<'quick' | 'full', Profile> = {
  quick: {
    warmupOps: 40,
    latencyMs: 1_500,
    workBlocks: 1,
    blockMs: 40,
    raceBlocks: 2,
    raceMs: 300,
    raceJobs: 1_000,
    fleetJobs: 200,
    fleetReplicas: 20,
    fleetRounds: 1,
    fleetSlices: 2,
    historyRuns: 2_000,
    historyWindow: 200,
    otelRounds: 4,
    otelBlockMs: 60,
  },
  full: {
    warmupOps: 500,
    latencyMs: 45_000,
    workBlocks: 6,
    blockMs: 300,
    raceBlocks: 6,
    raceMs: 3000,
    raceJobs: 20_000,
    fleetJobs: 10_000,
    fleetReplicas: 20,
    fleetRounds: 2,
    fleetSlices: 10,
    historyRuns: 100_000,
    historyWindow: 1_000,
    otelRounds: 10,
    otelBlockMs: 500,
  },
}

export const HOUR = 3_600_000
const HOLDER = 'bench'
const noop = () => undefined

// Winning claims cycle through many jobs with a short lease, so each finds its own previous lease
// expired without an extra statement to expire it (which would add its own xid and WAL).
const WIN_JOBS = 500
const WIN_LEASE_MS = 20

/** A server, the connections the cases use, and a table per role. */
export interface Bench {
  server: Server
  profile: Profile
  /** The copy of the library measured (see library.ts); every case calls this one. */
  library: Library
  /** Setup and the server marks; never timed. */
  observer: pg.Client
  /**
   * The single operations, as users send them: a `pg` Pool of one connection, so every case and
   * the floor go through the same pool and the same session.
   */
  pool: pg.Pool
  /** The patterns that check out a connection per tick (advisory lock), and the connections-held probe. */
  tickPool: pg.Pool
  /**
   * The ShedLock-style claims, on a session of their own: their first statement fails with a
   * duplicate key, and `pool.query` ends a connection whose query failed, so on the shared pool every
   * such claim would replace the session the other cases use (and with it their prepared statements
   * and warm caches). ShedLock's JDBC connections survive the error; a Client does too.
   */
  shedClient: pg.Client
  tables: Record<TableRole, string>
  /** The CPU each server process has used so far (embedded server only). */
  cpu: (() => CpuMark) | undefined
  /** A new connected client, ended by the cleanups unless `release`d first. */
  connect(url?: string): Promise<pg.Client>
  release(client: pg.Client): Promise<void>
  /** Counts an operation whose outcome was not the one set up (a win where a loss was expected). */
  expect(ok: boolean): void
  readonly unexpected: number
  /**
   * The statements the library sent for a losing claim and for `ctx.renew()`, sent again by the
   * cases that time them alone, and the probe and claim of a won claim on the floor round's table.
   */
  sent: { losingClaim: SentStatement; renew: SentStatement; floorProbe: SentStatement; floorClaim: SentStatement }
}

/** The occurrence the keyed cases name: long past, so never too early. */
const OCCURRENCE_MS = Date.UTC(2026, 0, 1)

const TABLE_ROLES = [
  'win',
  'winUnprepared',
  'winRecorded',
  'lose',
  'renew',
  'plainWin',
  'plainWinPrepared',
  'plainLose',
  'shed',
  'raceLease',
  'racePlain',
  'fleetLease',
  'fleetPlain',
  'fleetOccurrence',
  'fleetFloor',
  'history',
] as const
type TableRole = (typeof TABLE_ROLES)[number]

/**
 * Opens the connections and creates the tables (each dropped again by `cleanups`). A table per
 * role, so the rows one case rewrites never share a page with the row another case only reads
 * (reading a page full of dead row versions can prune it, which writes WAL). `beside`: the bench
 * of the build measured alongside, whose pools this one shares.
 */
export async function openBench(
  server: Server,
  profile: Profile,
  cleanups: Cleanups,
  library: Library,
  beside?: Bench,
): Promise<Bench> {
  const { createTableSql, quoteTable } = library
  // A build from before the run history (the previous build, measured beside this one) has none.
  const historyTableOf = (library as Partial<Library>).historyTableOf
  const clients = new Set<pg.Client>()
  const connect = async (url = server.url) => {
    const c = new pg.Client({ connectionString: url })
    c.on('error', () => {})
    await c.connect()
    clients.add(c)
    return c
  }
  cleanups.add(() => Promise.all([...clients].map((c) => c.end().catch(() => {}))).then(() => {}))
  const observer = await connect()
  const shedClient = await connect()
  // Another build measured `beside` this one sends through the same pools: a connection used for a
  // few cases only, between many cases on another, answers a quarter slower (its backend sleeps).
  const pool = beside?.pool ?? new pg.Pool({ connectionString: server.url, max: 1 })
  const tickPool = beside?.tickPool ?? new pg.Pool({ connectionString: server.url, max: 4 })
  for (const p of beside === undefined ? [pool, tickPool] : []) {
    p.on('error', () => {})
    cleanups.add(() => p.end())
  }

  const suffix = randomBytes(3).toString('hex')
  const tables = Object.fromEntries(
    TABLE_ROLES.map((role) => [role, `bench_${role.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}_${suffix}`]),
  ) as Record<TableRole, string>
  // Every table by the measured copy's own DDL.
  for (const table of Object.values(tables)) {
    await observer.query(createTableSql(table))
    // The measured copy's DDL makes a new table's run history beside it.
    const dropped = [table, ...(historyTableOf ? [historyTableOf(table)] : [])].map(quoteTable).join(', ')
    cleanups.add(async () => void (await observer.query(`DROP TABLE IF EXISTS ${dropped}`)))
  }
  // Rows that exist, with an expired lease: the steady state of a job that has run before.
  for (const table of [tables.win, tables.winUnprepared, tables.plainWin, tables.plainWinPrepared]) {
    await observer.query(
      `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder)
       SELECT 'win-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, ${WIN_JOBS - 1}) AS i`,
    )
  }
  // The job every losing claimant finds held by another replica.
  for (const table of [tables.lose, tables.plainLose, tables.shed]) {
    await observer.query(
      `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder) VALUES ('held', clock_timestamp() + interval '1 day', 'other')`,
    )
  }
  // The job an occurrence-keyed loser finds already run: its lease expired, its occurrence claimed.
  await observer.query(
    `INSERT INTO ${quoteTable(tables.lose)} (job_name, lease_until, holder, last_occurrence)
     VALUES ('ran', clock_timestamp() - interval '1 hour', 'other', $1)`,
    [new Date(OCCURRENCE_MS)],
  )
  // Nothing is taught by a claim any more: each handle reads the table's shape from the catalog
  // once, at its first use (the warm-up's first call through the pool, and each fleet replica's
  // first claim, as a replica that starts does).
  const sent = await sentStatements(library, pool, tables)
  let unexpected = 0
  return {
    server,
    profile,
    library,
    observer,
    pool,
    tickPool,
    shedClient,
    tables,
    cpu: serverCpu(server.dataDir),
    connect,
    async release(client) {
      clients.delete(client)
      await client.end()
    },
    expect(ok) {
      if (!ok) unexpected++
    },
    get unexpected() {
      return unexpected
    },
    sent,
  }
}

/**
 * The statements the library sends, read from what it sent: a losing claim on the held job, and
 * the claim of the job the renew case keeps renewing with its `ctx.renew()`. Their texts and names
 * are the library's own, so they come from the copy measured, not from its modules.
 *
 * A fresh handle's first statement is the catalog read of the table's shape (once per handle and
 * table), so the losing claim is recorded from the second call: by then the handle knows the table,
 * and a loser sends its claim alone.
 */
async function sentStatements(
  { withCronLease }: Library,
  pool: pg.Pool,
  tables: Record<TableRole, string>,
): Promise<Bench['sent']> {
  const losing = recordingPool(pool)
  const lose = () => withCronLease(losing.db, 'held', HOUR, noop, { table: tables.lose, holder: HOLDER })
  if ((await lose()).ran) throw new Error('the first losing claim won')
  if (!losing.sent.some((s) => s.text.startsWith(TABLE_FACTS_TEXT))) {
    throw new Error(`a fresh handle's first claim should read the table's shape first, but sent: ${texts(losing.sent)}`)
  }
  losing.sent.length = 0
  const lost = await lose()
  const losingClaim = losing.sent[0]
  if (lost.ran || losing.sent.length !== 1 || losingClaim === undefined) {
    throw new Error(
      `a losing claim on a known table should send one statement and not run, but sent ${losing.sent.length}: ${texts(losing.sent)}`,
    )
  }
  if (losingClaim.text.startsWith(TABLE_FACTS_TEXT)) throw new Error('the recorded losing claim is the catalog read')
  const renewing = recordingPool(pool)
  let renew: SentStatement | undefined
  await withCronLease(
    renewing.db,
    'renewing',
    HOUR,
    async (ctx) => {
      const before = renewing.sent.length
      if (!(await ctx.renew())) throw new Error('the renewing claim could not renew its own lease')
      renew = renewing.sent[before]
    },
    { table: tables.renew },
  )
  if (renew === undefined) throw new Error('ctx.renew() sent no statement')
  // A fresh handle's first claim, won: the catalog read, the probe, then the claim.
  const winning = recordingPool(pool)
  const won = await withCronLease(winning.db, 'floor', HOUR, noop, {
    table: tables.fleetFloor,
    holder: HOLDER,
    record: false,
  })
  const [floorProbe, floorClaim, ...more] = winning.sent.filter((s) => !s.text.startsWith(TABLE_FACTS_TEXT))
  if (!won.ran || floorProbe === undefined || floorClaim === undefined || more.length > 0) {
    throw new Error(
      `a fresh handle's won claim should send the probe, then the claim, but sent: ${texts(winning.sent)}`,
    )
  }
  return { losingClaim, renew, floorProbe, floorClaim }
}

/** How the library's catalog read of a table's shape begins (src/table-facts.ts). */
const TABLE_FACTS_TEXT = 'SELECT to_regclass($1::text) IS NOT NULL AS exists'

const texts = (sent: SentStatement[]) => sent.map((s) => JSON.stringify(s.text.slice(0, 60))).join(', ') || 'nothing'

/** One single operation, timed one call at a time. */
export interface Case {
  id: string
  label: string
  group: 'floor' | 'library' | 'peer' | 'diagnostic'
  unit: string
  op: (i: number) => Promise<void>
}

/**
 * The single operations on the server directly, through the pool of one connection (the advisory
 * pattern through its own pool, ShedLock-style through its own client), each compared pair listed
 * together.
 */
export function singleCases(b: Bench): Case[] {
  const { pool, tables: t, expect } = b
  const { quoteTable, withCronLease } = b.library
  const knownRows = new Set<string>(['held'])
  const claim = claimOf(b)
  const claimAt = (job: string, occurrence: Date) =>
    withCronLease(pool, job, HOUR, noop, { table: t.lose, holder: HOLDER, record: false, occurrence })
  // The statement a losing claim sent (the probe: its one row is the loss), as a named statement
  // straight through the pool, with the values the library sent with its own.
  const loseNamed = (name: string, text: string) => async () =>
    expect((await pool.query({ name, text, values: b.sent.losingClaim.values })).rowCount === 1)
  // Texts built once, as the library holds its own: a text rebuilt on every call costs the driver
  // a comparison of two long strings before it can reuse the statement.
  const selectHeldText = `SELECT 1 FROM ${quoteTable(t.lose)} WHERE job_name = $1::text AND lease_until > clock_timestamp()`
  return [
    {
      id: 'select1',
      label: 'SELECT 1',
      group: 'floor',
      unit: 'query',
      op: async () => void (await pool.query('SELECT 1')),
    },
    {
      id: 'claim_lose',
      label: 'claim, losing',
      group: 'library',
      unit: 'claim',
      op: loseOp(b),
    },
    {
      // The occurrence a scheduler names, a new Date on every call as node-cron's ctx.date is.
      id: 'claim_lose_occurrence',
      label: 'claim, losing, naming an occurrence (lease held)',
      group: 'library',
      unit: 'claim',
      op: async () => expect(!(await claimAt('held', new Date(OCCURRENCE_MS))).ran),
    },
    {
      id: 'claim_lose_occurrence_ran',
      label: 'claim, losing, naming an occurrence already run (lease expired)',
      group: 'diagnostic',
      unit: 'claim',
      op: async () => expect(!(await claimAt('ran', new Date(OCCURRENCE_MS))).ran),
    },
    {
      id: 'claim_lose_unprepared',
      label: 'claim, losing, prepare: false (plain text)',
      group: 'diagnostic',
      unit: 'claim',
      op: async () => expect(!(await claim('held', HOUR, t.lose, false)).ran),
    },
    {
      // The same statement without the library around it: what the validation, the promise steps
      // and reading the result add.
      id: 'claim_lose_statement',
      label: 'claim, losing: its statement alone (named, pool.query)',
      group: 'diagnostic',
      unit: 'claim',
      op: loseNamed('bench-claim-statement', b.sent.losingClaim.text),
    },
    {
      // The least any claim has to do: read the job's row with a parameterised statement.
      id: 'select_held',
      label: 'SELECT the held row (parameterised, plain text)',
      group: 'diagnostic',
      unit: 'query',
      op: async () => expect((await pool.query(selectHeldText, ['held'])).rowCount === 1),
    },
    {
      id: 'claim_win',
      label: 'claim, winning',
      group: 'library',
      unit: 'claim',
      op: async (i) => expect((await claim(`win-${i % WIN_JOBS}`, WIN_LEASE_MS, t.win)).ran),
    },
    {
      id: 'claim_win_recorded',
      label: 'claim, winning, then its outcome recorded (default)',
      group: 'diagnostic',
      unit: 'claim',
      op: async (i) => expect((await claim(`win-${i % WIN_JOBS}`, WIN_LEASE_MS, t.winRecorded, true, true)).ran),
    },
    {
      id: 'plain_win',
      label: 'plain upsert, winning',
      group: 'peer',
      unit: 'claim',
      op: async (i) =>
        expect(
          (await pool.query(plainUpsertSql(t.plainWin), [`win-${i % WIN_JOBS}`, WIN_LEASE_MS, HOLDER])).rowCount === 1,
        ),
    },
    {
      // What every claim cost before prepared statements, and still costs with prepare: false.
      id: 'claim_win_unprepared',
      label: 'claim, winning, prepare: false (plain text)',
      group: 'diagnostic',
      unit: 'claim',
      op: async (i) => expect((await claim(`win-${i % WIN_JOBS}`, WIN_LEASE_MS, t.winUnprepared, false)).ran),
    },
    {
      // Not how the original package sent it: shows how much of its win is parsing and planning.
      id: 'plain_win_prepared',
      label: 'plain upsert, winning, as a named prepared statement',
      group: 'diagnostic',
      unit: 'claim',
      op: async (i) =>
        expect(
          (
            await pool.query({
              name: 'bench-plain-win',
              text: plainUpsertSql(t.plainWinPrepared),
              values: [`win-${i % WIN_JOBS}`, WIN_LEASE_MS, HOLDER],
            })
          ).rowCount === 1,
        ),
    },
    {
      // ctx.renew()'s statement, sent again as the context sent it.
      id: 'renew',
      label: 'renew (fenced)',
      group: 'library',
      unit: 'renew',
      op: async () => expect((await sendAgain(pool, b.sent.renew)).rowCount === 1),
    },
    {
      id: 'plain_lose',
      label: 'plain upsert, losing',
      group: 'peer',
      unit: 'claim',
      op: async () => expect((await pool.query(plainUpsertSql(t.plainLose), ['held', HOUR, HOLDER])).rowCount === 0),
    },
    {
      id: 'advisory',
      label: 'advisory lock (connect, try, unlock, release)',
      group: 'peer',
      unit: 'tick',
      op: async () => expect((await advisoryTick(b.tickPool, 'advisory', noop)).ran),
    },
    {
      id: 'shedlock_lose_first',
      label: 'ShedLock-style, losing: insert, then update',
      group: 'peer',
      unit: 'claim',
      op: async () => expect(!(await shedLockClaim(b.shedClient, t.shed, 'held', HOUR, HOLDER, new Set()))),
    },
    {
      id: 'shedlock_lose',
      label: 'ShedLock-style, losing: update (row known)',
      group: 'peer',
      unit: 'claim',
      op: async () => expect(!(await shedLockClaim(b.shedClient, t.shed, 'held', HOUR, HOLDER, knownRows))),
    },
  ]
}

// The claim as users send it; `record` only adds the statement a won tick sends after it settles,
// which is the outcome's bookkeeping, not the claim (measured on its own row).
const claimOf =
  (b: Bench) =>
  (job: string, leaseMs: number, table: string, prepare = true, record = false) =>
    b.library.withCronLease(b.pool, job, leaseMs, noop, { table, holder: HOLDER, prepare, record })

/** `claim_lose`'s call: the job another replica holds, lease-only, default options. */
function loseOp(b: Bench): () => Promise<void> {
  const claim = claimOf(b)
  return async () => b.expect(!(await claim('held', HOUR, b.tables.lose)).ran)
}

/** `claim_lose` timed with pg-cron-lease/otel on, in blocks of its own (see {@link otelRounds}). */
export function otelCase(b: Bench): Case {
  return {
    id: 'claim_lose_otel',
    label: 'claim, losing, pg-cron-lease/otel on (timed back to back, in blocks)',
    group: 'library',
    unit: 'claim',
    op: loseOp(b),
  }
}

/** The losing claim's blocks with the instrumentation off, on, and off again. */
export interface OtelSeries {
  off: Series
  on: Series
  again: Series
}

/**
 * The losing claim with pg-cron-lease/otel off, on and off again, round after round, each a block
 * of `claim_lose`'s call: its client CPU on against off is the instrumentation's cost, off against
 * off again the noise band of that comparison. It cannot join the other cases' rounds: the
 * channels are the process's, so while it is on every case's claims would publish. On is the real
 * SDK as an application sets it up (a batch span processor, a periodic metric reader, in-memory
 * exporters), passed to `instrument` rather than registered, so no global provider or context
 * manager stays behind for the cases measured after it.
 */
export async function otelRounds(
  b: Bench,
  instrument: (opts: { tracerProvider: NodeTracerProvider; meterProvider: MeterProvider }) => () => void,
): Promise<OtelSeries> {
  const tracerProvider = new NodeTracerProvider({
    spanProcessors: [new BatchSpanProcessor(new InMemorySpanExporter())],
  })
  const reader = new PeriodicExportingMetricReader({
    exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
    exportIntervalMillis: 10_000,
  })
  const meterProvider = new MeterProvider({ readers: [reader] })
  const op = loseOp(b)
  const series: OtelSeries = { off: new Series(), on: new Series(), again: new Series() }
  const block = (s: Series, timed: boolean) => s.block(b.observer, op, b.profile.otelBlockMs, 20, undefined, timed)
  try {
    const stop = instrument({ tracerProvider, meterProvider })
    for (let i = 0; i < b.profile.warmupOps; i++) await op()
    stop()
    for (let round = 0; round < b.profile.otelRounds; round++) {
      await block(series.off, false)
      const stop = instrument({ tracerProvider, meterProvider })
      try {
        await block(series.on, true)
      } finally {
        stop()
      }
      await block(series.again, false)
    }
  } finally {
    await Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()])
  }
  return series
}

/**
 * The losing claim through PgBouncer in transaction mode, on a Pool of its own: with the default
 * options once the pool has fallen back to plain text (see {@link forceFallback}), and with
 * `prepare: false`, which is what every claim sent before prepared statements. `SELECT 1` through
 * the same pool shows what the extra hop costs.
 */
export function bouncerCases(b: Bench, bouncerPool: pg.Pool): Case[] {
  const claim = (prepare: boolean) =>
    b.library.withCronLease(bouncerPool, 'held', HOUR, noop, { table: b.tables.lose, holder: HOLDER, prepare })
  return [
    {
      id: 'bouncer_select1',
      label: 'SELECT 1, through PgBouncer',
      group: 'diagnostic',
      unit: 'query',
      op: async () => void (await bouncerPool.query('SELECT 1')),
    },
    {
      id: 'bouncer_claim_lose',
      label: 'claim, losing, through PgBouncer (fallen back)',
      group: 'library',
      unit: 'claim',
      op: async () => b.expect(!(await claim(true)).ran),
    },
    {
      id: 'bouncer_claim_lose_unprepared',
      label: 'claim, losing, through PgBouncer, prepare: false',
      group: 'diagnostic',
      unit: 'claim',
      op: async () => b.expect(!(await claim(false)).ran),
    },
  ]
}

/** The single operations the targets that compare builds read. */
// claim_lose_occurrence is read against the previous build's claim_lose; its band needs this build's copy of it.
export const COMPARED = ['claim_lose', 'claim_lose_occurrence', 'claim_win', 'claim_win_recorded', 'bouncer_claim_lose']

/**
 * One build's cases the targets that compare builds read (`COMPARED`), from a bench of its own
 * (`b`: its tables and statements, the pools shared), ids prefixed with `prefix`. Both builds'
 * run so, each on tables no other case touches: a table many cases read answers faster.
 */
export function comparedCases(b: Bench, bouncerPool: pg.Pool | null, prefix: string, build: string): Case[] {
  const cases = [...singleCases(b), ...(bouncerPool === null ? [] : bouncerCases(b, bouncerPool))]
  return cases
    .filter((c) => COMPARED.includes(c.id))
    .map((c) => ({ ...c, id: `${prefix}${c.id}`, label: `${build}: ${c.label}`, group: 'diagnostic' as const }))
}

/**
 * Sends losing claims from every client of `bouncerPool` at once, with the default options, until
 * the pool has met a refusal and fallen back to plain text (a PgBouncer before 1.21 with fewer
 * server connections than the pool has clients refuses within the first round). Resolves whether
 * it fell back: a PgBouncer that keeps prepared statements never refuses.
 */
export async function forceFallback(b: Bench, bouncerPool: pg.Pool, clients: number): Promise<boolean> {
  // The library sends a named statement as query({ name, … }) and plain text as query(text, params):
  // once a claim arrives as plain text, the pool has fallen back.
  const query = bouncerPool.query
  let fellBack = false
  bouncerPool.query = function (this: pg.Pool, ...args: unknown[]) {
    if (typeof args[0] === 'string') fellBack = true
    return (query as (...a: unknown[]) => unknown).apply(this, args)
  } as typeof query
  try {
    for (let round = 0; round < 50 && !fellBack; round++) {
      await Promise.all(
        Array.from({ length: clients }, () =>
          b.library.withCronLease(bouncerPool, 'held', HOUR, noop, { table: b.tables.lose, holder: HOLDER }),
        ),
      )
    }
  } finally {
    bouncerPool.query = query
  }
  return fellBack
}

/** A race's timing, and how many rounds had more than one winner or none. */
export interface RaceResult extends Stats {
  claimants: number
  rounds: number
  violations: number
  empty: number
}

/**
 * Every claimant on its own connection fires at once; one round is timed until all have answered.
 * Each round races for a job of its own whose row exists with an expired lease, so every round has
 * exactly one lease to win and no statement is needed between rounds to expire the last one.
 */
export async function raceCase(b: Bench, claimants: number, kind: 'lease' | 'plain'): Promise<RaceResult> {
  const { profile, observer } = b
  const { quoteTable, withCronLease } = b.library
  const table = kind === 'lease' ? b.tables.raceLease : b.tables.racePlain
  const conns = await Promise.all(Array.from({ length: claimants }, () => b.connect()))
  await observer.query(
    `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder)
     SELECT 'race${claimants}-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, ${profile.raceJobs - 1}) AS i
     ON CONFLICT (job_name) DO NOTHING`,
  )
  await observer.query(`VACUUM ANALYZE ${quoteTable(table)}`)
  let violations = 0
  let empty = 0
  let next = 0
  const claim = async (c: pg.Client, job: string, i: number): Promise<boolean> =>
    kind === 'lease'
      ? (await withCronLease(c, job, HOUR, noop, { table, holder: `c${i}` })).ran
      : (await c.query(plainUpsertSql(table), [job, HOUR, `c${i}`])).rowCount === 1
  const round = async () => {
    if (next >= profile.raceJobs) throw new Error(`a race ran out of its ${profile.raceJobs} prepared jobs`)
    const job = `race${claimants}-${next++}`
    const winners = (await Promise.all(conns.map((c, i) => claim(c, job, i)))).filter(Boolean).length
    if (winners > 1) violations++
    if (winners === 0) empty++
  }
  for (let r = 0; r < 20; r++) await round()
  const s = new Series()
  for (let r = 0; r < profile.raceBlocks; r++)
    await s.block(observer, round, profile.raceMs / profile.raceBlocks, 5, b.cpu)
  for (const c of conns) await b.release(c)
  return { ...s.stats(), claimants, rounds: s.samples.length, violations, empty }
}

/**
 * Connections held while the tick runs, read from the pool inside the tick itself: the library
 * holds none (the claim is one statement), the advisory pattern holds one for the whole tick.
 */
export async function connectionsHeld(b: Bench): Promise<Record<string, number>> {
  const { tickPool: pool, tables } = b
  const { withCronLease } = b.library
  const suffix = randomBytes(3).toString('hex')
  const held = async (run: (tick: () => number) => Promise<unknown>) => {
    let inTick = -1
    await run(() => {
      inTick = pool.totalCount - pool.idleCount
      return inTick
    })
    return inTick
  }
  return {
    claim_win: await held((tick) => withCronLease(pool, `held-${suffix}`, HOUR, tick, { table: tables.win })),
    plain_win: await held(async (tick) => {
      if ((await pool.query(plainUpsertSql(tables.plainWin), [`held-${suffix}`, HOUR, HOLDER])).rowCount === 1) tick()
    }),
    advisory: await held((tick) => advisoryTick(pool, 'advisory', tick)),
    shedlock_lose_first: await held(async (tick) => {
      if (await shedLockClaim(pool, tables.shed, `held-${suffix}`, HOUR, HOLDER, new Set())) tick()
    }),
  }
}

/**
 * The fleet's claimants: the library as users call it (default options: prepared), lease-only;
 * the library with every replica naming the same occurrence of each job; the original package's
 * plain upsert as it sent it (plain text); and the floor, which no rule of who sends what can
 * beat: each job's winner, chosen in advance, sends the library's claim alone, and every other
 * replica sends the library's probe alone (a diagnostic, not a way to claim).
 */
export type FleetKind = 'lease' | 'plain' | 'occurrence' | 'floor'

/** One fleet round. */
export interface FleetResult {
  kind: FleetKind
  order: 'lockstep' | 'staggered'
  jobs: number
  replicas: number
  claims: number
  winners: number
  ms: number
  claimsPerSec: number
  xidsPerClaim: number
  walPerClaim: number
  /**
   * Losing claimants that raced the winner's commit: they passed the check before the winner
   * committed, then waited on the row lock and locked it, each taking a transaction ID (and WAL)
   * for nothing. Every xid beyond one per winner is one of these.
   */
  lockstepLosers: number
  /** CPU per claim, in µs: every server process, the claimants' backends alone (null when the server is not local), and this client process. */
  serverCpuUsPerClaim: number | null
  backendCpuUsPerClaim: number | null
  clientCpuUsPerClaim: number
}

/**
 * Every replica claims every job once, all at the same time, each on its own connection; the round
 * is timed until the last claim has answered. Every job's row exists with an expired lease.
 * `lockstep`: every replica claims the jobs in the same order from the same moment, as replicas
 * whose schedulers fire the same list at the same second do; `staggered`: each starts at its own
 * offset.
 */
export async function fleetRound(b: Bench, kind: FleetKind, order: 'lockstep' | 'staggered'): Promise<FleetResult> {
  const fleet = await openFleet(b, kind, order)
  await fleet.claim(0, b.profile.fleetJobs)
  return fleet.finish()
}

/**
 * Rounds of one kind by several builds (each a bench of its own, on its own table), in turns: the
 * jobs in `slices` slices, every build's replicas claiming one slice before the next build's
 * claim theirs, the first turn passing from build to build (`first`). A busy moment of a shared
 * machine then falls on every build alike, where a round after a round lets one build have it.
 */
export async function fleetRoundsInTurns(
  builds: Bench[],
  kind: FleetKind,
  order: 'lockstep' | 'staggered',
  slices: number,
  first: number,
): Promise<FleetResult[]> {
  const fleets: Fleet[] = []
  for (const b of builds) fleets.push(await openFleet(b, kind, order))
  const jobs = builds[0]!.profile.fleetJobs
  const size = Math.ceil(jobs / slices)
  for (let slice = 0; slice * size < jobs; slice++) {
    for (let i = 0; i < fleets.length; i++) {
      await fleets[(first + slice + i) % fleets.length]!.claim(slice * size, Math.min(jobs, (slice + 1) * size))
    }
  }
  return Promise.all(fleets.map((f) => f.finish()))
}

/**
 * The claims of fleet rounds of several builds, pooled: claims over the time they took together,
 * and each per-claim figure over every claim.
 */
export function pooledRounds(rounds: FleetResult[]): FleetResult {
  const claims = rounds.reduce((sum, r) => sum + r.claims, 0)
  const ms = rounds.reduce((sum, r) => sum + r.ms, 0)
  const perClaim = (figure: (r: FleetResult) => number | null) =>
    rounds.some((r) => figure(r) === null) ? null : rounds.reduce((sum, r) => sum + figure(r)! * r.claims, 0) / claims
  return {
    ...rounds[0]!,
    claims,
    winners: rounds.reduce((sum, r) => sum + r.winners, 0),
    ms,
    claimsPerSec: (claims / ms) * 1000,
    xidsPerClaim: perClaim((r) => r.xidsPerClaim)!,
    walPerClaim: perClaim((r) => r.walPerClaim)!,
    lockstepLosers: rounds.reduce((sum, r) => sum + r.lockstepLosers, 0) / rounds.length,
    serverCpuUsPerClaim: perClaim((r) => r.serverCpuUsPerClaim),
    backendCpuUsPerClaim: perClaim((r) => r.backendCpuUsPerClaim),
    clientCpuUsPerClaim: perClaim((r) => r.clientCpuUsPerClaim)!,
  }
}

/** A fleet round set up, its jobs claimed a slice at a time (`claim`), then `finish`ed. */
interface Fleet {
  claim(from: number, to: number): Promise<void>
  finish(): Promise<FleetResult>
}

async function openFleet(b: Bench, kind: FleetKind, order: 'lockstep' | 'staggered'): Promise<Fleet> {
  const { observer, profile } = b
  const { quoteTable, withCronLease } = b.library
  const table = {
    lease: b.tables.fleetLease,
    plain: b.tables.fleetPlain,
    occurrence: b.tables.fleetOccurrence,
    floor: b.tables.fleetFloor,
  }[kind]
  const { fleetJobs: jobs, fleetReplicas: replicas } = profile
  await observer.query(`TRUNCATE ${quoteTable(table)}`)
  await observer.query(
    `INSERT INTO ${quoteTable(table)} (job_name, lease_until, holder)
     SELECT 'job-' || i, clock_timestamp() - interval '1 hour', 'setup' FROM generate_series(0, ${jobs - 1}) AS i`,
  )
  await observer.query(`VACUUM ANALYZE ${quoteTable(table)}`)
  // Every kind starts right after a checkpoint, so each pays the same full-page images.
  await observer.query('CHECKPOINT')
  const conns = await Promise.all(Array.from({ length: replicas }, () => b.connect()))
  const pids = await Promise.all(conns.map(async (c) => (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid))
  const backends = backendCpu(pids, b.server.dataDir)
  const { floorProbe, floorClaim } = b.sent
  const claim = async (c: pg.Client, job: string, holder: string, replica: number): Promise<boolean> => {
    // record: false: the round measures claims; a won tick's outcome record is one statement per
    // occurrence (not per replica), measured on its own among the single operations.
    if (kind === 'lease') return (await withCronLease(c, job, HOUR, noop, { table, holder, record: false })).ran
    if (kind === 'occurrence') {
      const occurrence = new Date(OCCURRENCE_MS)
      return (await withCronLease(c, job, HOUR, noop, { table, holder, record: false, occurrence })).ran
    }
    if (kind === 'floor') {
      if (Number(job.slice('job-'.length)) % replicas !== replica) {
        await c.query({ name: floorProbe.name, text: floorProbe.text, values: [job, ...floorProbe.values.slice(1)] })
        return false
      }
      const values = [job, HOUR, holder, ...floorClaim.values.slice(3)]
      return (await c.query({ name: floorClaim.name, text: floorClaim.text, values })).rowCount === 1
    }
    return (await c.query(plainUpsertSql(table), [job, HOUR, holder])).rowCount === 1
  }
  let winners = 0
  let ms = 0
  let xids = 0
  let wal = 0
  let serverMs: number | null = b.cpu ? 0 : null
  let backendMs: number | null = backends ? 0 : null
  const clientCpu = { user: 0, system: 0 }
  return {
    async claim(from, to) {
      const size = to - from
      const cpuBefore = b.cpu?.()
      const backendsBefore = backends?.()
      const clientBefore = process.cpuUsage()
      const before = await mark(observer)
      const start = clockMs()
      await Promise.all(
        conns.map(async (c, r) => {
          for (let j = 0; j < size; j++) {
            const job = `job-${from + (order === 'staggered' ? (j + Math.floor((r * size) / replicas)) % size : j)}`
            if (await claim(c, job, `replica-${r}`, r)) winners++
          }
        }),
      )
      ms += clockMs() - start
      const used = await spent(observer, before)
      xids += used.xids
      wal += used.wal
      const client = process.cpuUsage(clientBefore)
      clientCpu.user += client.user
      clientCpu.system += client.system
      if (serverMs !== null && b.cpu && cpuBefore !== undefined) serverMs += cpuMsBetween(cpuBefore, b.cpu())
      if (backendMs !== null && backends && backendsBefore !== undefined) {
        backendMs += cpuMsBetween(backendsBefore, backends())
      }
    },
    async finish() {
      for (const c of conns) await b.release(c)
      const claims = jobs * replicas
      b.expect(winners === jobs)
      return {
        kind,
        order,
        jobs,
        replicas,
        claims,
        winners,
        ms,
        claimsPerSec: (claims / ms) * 1000,
        xidsPerClaim: xids / claims,
        walPerClaim: wal / claims,
        lockstepLosers: Math.max(0, xids - winners),
        serverCpuUsPerClaim: serverMs === null ? null : (serverMs / claims) * 1000,
        backendCpuUsPerClaim: backendMs === null ? null : (backendMs / claims) * 1000,
        clientCpuUsPerClaim: (clientCpu.user + clientCpu.system) / claims,
      }
    },
  }
}

/** A latency summary of one set of samples, in ms. */
export interface Latency {
  samples: number
  p50: number
  p90: number
}

/** The run history's write, early and late in one job's life (see {@link historyWrite}). */
export interface HistoryResult {
  /** Runs of the one job. */
  runs: number
  /** The outcome record (history write included) of young jobs at their runs 5 to 15, timed in turn with `late`. */
  young: Latency
  /** The one job's record at its last `historyWindow` runs (around run `runs`). */
  late: Latency
  /** The one job's own record at its runs 5 to 15, at the start: another moment of the machine, so information only. */
  early: Latency
  /** The one job's rows in the history table at the end, and the most it may keep (keep + keepFailed). */
  rows: number
  limit: number
  /** The history table at the end: its heap and its index in kB (what the trim leaves dead stays until vacuumed), and how often autovacuum had run on it. */
  tableKb: number
  indexKb: number
  autovacuums: number
  /** The whole case's time, and the part of it spent in the runs sent in a loop on the server. */
  ms: number
  serverRunsMs: number
}

/**
 * Runs `from` to `to` of `job` sent in a loop on the server, a few thousand a call, only to bring
 * the job's history to the state of its run `to` in seconds rather than minutes of round trips:
 * each run is the library's own claim as it sent it (which writes the run's row and trims the
 * job's rows), its lease ended first so that it wins, then the library's own outcome record as it
 * sent it (`records`, every tenth the failed run's), with that claim's token and run number,
 * committed on its own. Not timed; `synchronous_commit` is off only for these runs.
 */
async function fastForward(
  b: Bench,
  run: {
    table: string
    job: string
    claim: SentStatement
    records: { ok: SentStatement; failed: SentStatement }
    from: number
    to: number
  },
): Promise<void> {
  const { observer } = b
  const { quoteTable } = b.library
  const literal = (v: unknown) => (v === null || v === undefined ? 'NULL' : `'${String(v).replace(/'/g, "''")}'`)
  // What each run's claim returns, in the order the record takes it: its token, and its run number.
  const fromClaim: Record<number, string> = { 1: 'token', 5: 'number' }
  // Every parameter as text (each is cast in the statement).
  const args = (r: SentStatement, from: Record<number, string> = {}) =>
    r.values.map((v, i) => from[i] ?? `${literal(v)}::text`).join(', ')
  const parameters = (sent: SentStatement) => sent.values.map(() => 'text').join(', ')
  // Each statement as the body of a function, whose $1… are its parameters: its plan is kept
  // between runs as a prepared statement's is (an EXECUTE would plan it again every run).
  const recordOf = async (name: string, sent: SentStatement) => {
    const record = `pg_temp.bench_history_${name}`
    await observer.query(
      `CREATE OR REPLACE FUNCTION ${record}(${parameters(sent)}) RETURNS void LANGUAGE plpgsql AS $bench$
BEGIN
${sent.text};
END $bench$`,
    )
    return record
  }
  const claim = 'pg_temp.bench_history_claim'
  await observer.query(
    `CREATE OR REPLACE FUNCTION ${claim}(${parameters(run.claim)})
RETURNS TABLE (won_token text, won_missed bigint, won_number bigint) LANGUAGE plpgsql AS $bench$
BEGIN
RETURN QUERY ${run.claim.text};
END $bench$`,
  )
  const ok = await recordOf('ok', run.records.ok)
  const failed = await recordOf('failed', run.records.failed)
  const BATCH = 5_000
  await observer.query('SET synchronous_commit = off')
  for (let first = run.from; first <= run.to; first += BATCH) {
    const last = Math.min(run.to, first + BATCH - 1)
    await observer.query(`DO $bench$
DECLARE token text; number text;
BEGIN
  FOR n IN ${first}..${last} LOOP
    UPDATE ${quoteTable(run.table)} SET lease_until = clock_timestamp() - interval '1 millisecond'
    WHERE job_name = ${literal(run.job)};
    SELECT won_token, won_number::text INTO token, number FROM ${claim}(${args(run.claim)});
    IF token IS NULL THEN RAISE EXCEPTION 'run % of the bench job was not won', n; END IF;
    IF n % 10 = 0 THEN
      PERFORM ${failed}(${args(run.records.failed, fromClaim)});
    ELSE
      PERFORM ${ok}(${args(run.records.ok, fromClaim)});
    END IF;
    COMMIT;
  END LOOP;
END $bench$`)
  }
  await observer.query('RESET synchronous_commit')
  // Each run recorded: the lease row's last run ended, as a record leaves it.
  const { rows } = await observer.query(
    `SELECT last_finished_at >= last_started_at AS recorded FROM ${quoteTable(run.table)} WHERE job_name = $1`,
    [run.job],
  )
  if (rows[0]?.recorded !== true) throw new Error(`the server-side runs of ${run.job} were not recorded`)
}

/** The history's default `{ keep, keepFailed }` (the `history` option left out), which the case uses. */
const DEFAULT_KEEP = { keep: 100, keepFailed: 20 }

/** How the library's outcome record with the history begins (recordRunSql), and its claim that writes the run's row. */
const RECORD_TEXT = 'WITH "db clock"'
const CLAIM_TEXT = 'WITH before AS MATERIALIZED'
const latency = (samples: number[]): Latency => {
  const sorted = [...samples].sort((a, b) => a - b)
  return { samples: sorted.length, p50: percentile(sorted, 0.5), p90: percentile(sorted, 0.9) }
}

/**
 * One job run `historyRuns` times back to back through `withCronLease` (default options, so the
 * history keeps 100 runs and 20 failed ones; every tenth run fails), timing the history's write of
 * each run: its claim, which writes the run's row and trims the job's rows, and its outcome record,
 * which ends that row. Its last `historyWindow` runs are timed in turn with young jobs' runs 5 to 15 in the same
 * table, so both see the same moments of the machine: the ratio is what the job's age costs.
 *
 * The lease is 1 ms, so the next claim usually finds it ended; one that does not claims again.
 */
export async function historyWrite(b: Bench): Promise<HistoryResult> {
  const { pool, observer, profile } = b
  const { withCronLease, historyTableOf, quoteTable } = b.library
  const table = b.tables.history
  const history = quoteTable(historyTableOf(table))
  // The history write of a run: its claim, which writes the run's row and trims, and its record.
  let recordMs: number | null = null
  let claimMs = 0
  let recorded: SentStatement | null = null
  let claimed: SentStatement | null = null
  const query = (config: string | SentStatement, values?: unknown[]) => {
    const statement = typeof config === 'string' ? { text: config, values: values ?? [] } : config
    const t0 = clockMs()
    const sent = typeof config === 'string' ? pool.query(config, values) : pool.query(config)
    const isRecord = statement.text.startsWith(RECORD_TEXT)
    if (!isRecord && !statement.text.startsWith(CLAIM_TEXT)) return sent
    return sent.then((result) => {
      if (isRecord) {
        recordMs = clockMs() - t0
        recorded = statement
      } else {
        claimMs = clockMs() - t0
        claimed = statement
      }
      return result
    })
  }
  const db: pg.Pool = Object.create(pool, { query: { value: query } })
  const failed = new Error('a failed run (the bench)')
  const fail = () => {
    throw failed
  }
  const run = async (job: string, n: number): Promise<number> => {
    for (;;) {
      recordMs = null
      const ran = await withCronLease(db, job, 1, n % 10 === 0 ? fail : noop, { table, holder: HOLDER }).then(
        (outcome) => outcome.ran,
        (error) => {
          if (error !== failed) throw error
          return true
        },
      )
      if (!ran) continue
      if (recordMs === null) throw new Error(`run ${n} of ${job} sent no outcome record with the history`)
      return claimMs + recordMs
    }
  }
  // The library's record of a run that went well and of one that failed, as it sent them.
  const sentRecord = async (n: number): Promise<SentStatement> => {
    await run(JOB, n)
    return recorded!
  }
  const { historyRuns: runs, historyWindow: window } = profile
  const JOB = 'history'
  const start = clockMs()
  const early: number[] = []
  for (let n = 1; n <= 18; n++) {
    const ms = await run(JOB, n)
    if (n >= 5 && n <= 15) early.push(ms)
  }
  const records = { ok: await sentRecord(19), failed: await sentRecord(20) }
  const claim = claimed as SentStatement | null
  if (claim === null) throw new Error('the runs of the bench job sent no claim that writes their row')
  const forwardStart = clockMs()
  await fastForward(b, { table, job: JOB, claim, records, from: 21, to: runs - window })
  const serverRunsMs = clockMs() - forwardStart
  const young: number[] = []
  const late: number[] = []
  for (let i = 0; i < window; i++) {
    late.push(await run(JOB, runs - window + i + 1))
    const n = (i % 20) + 1
    const ms = await run(`young-${Math.floor(i / 20)}`, n)
    if (n >= 5 && n <= 15) young.push(ms)
  }
  const ms = clockMs() - start
  const { rows } = await observer.query(`SELECT count(*)::int AS rows FROM ${history} WHERE job_name = $1`, [JOB])
  const { rows: stats } = await observer.query(
    `SELECT pg_table_size(relid)::int / 1024 AS table_kb, pg_indexes_size(relid)::int / 1024 AS index_kb,
       autovacuum_count::int AS autovacuums
     FROM pg_stat_user_tables WHERE relid = $1::regclass`,
    [history],
  )
  return {
    runs,
    young: latency(young),
    late: latency(late),
    early: latency(early),
    rows: rows[0].rows,
    limit: DEFAULT_KEEP.keep + DEFAULT_KEEP.keepFailed,
    tableKb: stats[0].table_kb,
    indexKb: stats[0].index_kb,
    autovacuums: stats[0].autovacuums,
    ms,
    serverRunsMs,
  }
}
