/**
 * `runDoctor`: everything the one-run-per-occurrence guarantee depends on, checked where the
 * application runs, and the guarantee itself proved there by a live race on a job of its own.
 */
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { releaseLease } from './admin.js'
import { clockOffset } from './clock.js'
import { withCronLease } from './lease.js'
import { migrateCommand } from './log.js'
import { compileOptions } from './options.js'
import { runStatement, transactionStatus } from './query.js'
import {
  databaseClockSql,
  deleteJobSql,
  historyTableOf,
  markSessionSql,
  privilegesSql,
  quoteTable,
  serverFactsSql,
  sessionProbeSql,
  tableFactsParams,
  tableFactsSql,
} from './sql.js'
import { handleState } from './state.js'
import type { Queryable } from './types.js'
import { checkQueryable, fail as refuse } from './validate.js'

/** Every check, in the order it runs; the ids are stable (docs/operations.md#doctor). */
export const DOCTOR_CHECKS = [
  'connection',
  'writable',
  'table',
  'privileges',
  'clock',
  'pooler',
  'prepared',
  'durability',
  'timeouts',
  'race',
] as const

/** One check's id. */
export type DoctorCheckId = (typeof DOCTOR_CHECKS)[number]

/**
 * What one check found: `pass`, `warn` (the guarantee holds, weakened or at a cost) or `fail`
 * (it does not hold here). `fix` says what to do, with a link into the docs; `null` on a pass.
 *
 * @example
 * const check: DoctorCheck = { id: 'clock', status: 'pass', summary: '…', detail: '…', fix: null }
 */
export interface DoctorCheck {
  id: DoctorCheckId
  status: 'pass' | 'warn' | 'fail'
  /** What was found, in one line. */
  summary: string
  /** The measurements behind it. */
  detail: string
  fix: string | null
}

/**
 * Options for {@link runDoctor}.
 *
 * @example
 * const opts: DoctorOptions = { table: 'jobs.leases', race: 5, rounds: 10 }
 */
export interface DoctorOptions {
  /** The lease table, `name` or `schema.name`. Default: `cron_leases`. */
  table?: string
  /** How many connections race (2 to 100), or `false` to skip the race (a role that may not write). Default: 10. */
  race?: number | false
  /** How many rounds they race (1 to 1000). Default: 20. */
  rounds?: number
  /** Opens one more connection (a `pg` Client, connected) for the race and the pooler check; closed with `end()` or `release()`. Default: `db.connect()` of a `pg` Pool. */
  connect?: () => Promise<Queryable>
  /** How far this host's clock may be off the database's before the clock check warns, in ms. Default: 5000, the claims' tolerance under `LEASE.EVERY_MINUTE`. */
  clockToleranceMs?: number | null
  /** Stops the race at the next round; its rows are deleted before `runDoctor` rejects with the signal's reason. */
  signal?: AbortSignal
  /** Told what the doctor is doing, as it starts each step. */
  onProgress?: (message: string) => void
}

// The claims' tolerance is 10% of the lease; the shortest preset, LEASE.EVERY_MINUTE, is 50 s.
const CLOCK_TOLERANCE_MS = 5000
const CLOCK_SAMPLES = 5
const LATENCY_SAMPLES = 20
const RACE_LEASE_MS = 60_000
// Far longer than a SELECT takes on a loaded server, however busy.
const BLOCKED_MS = 3000

type Row = Record<string, unknown>
type Verdict = Omit<DoctorCheck, 'id'>

const pass = (summary: string, detail: string): Verdict => ({ status: 'pass', summary, detail, fix: null })
const warn = (summary: string, detail: string, fix: string): Verdict => ({ status: 'warn', summary, detail, fix })
const fail = (summary: string, detail: string, fix: string): Verdict => ({ status: 'fail', summary, detail, fix })

/**
 * Runs every check against `db` and resolves one {@link DoctorCheck} per check, in
 * {@link DOCTOR_CHECKS} order (the race left out when `race: false`). It rejects only when the
 * database cannot be reached (the driver's error) or `signal` aborts; a fault found is a check's
 * `fail`. The race claims a job named `pg-cron-lease:doctor:<random>` and deletes every row of
 * that job afterwards, in the lease table and its history, whatever happens; no other row is touched.
 *
 * @example
 * const checks = await runDoctor(pool, { table: 'jobs.leases' })
 * if (checks.some((c) => c.status === 'fail')) throw new Error('pg-cron-lease cannot run here')
 */
export async function runDoctor(db: Queryable, opts?: DoctorOptions): Promise<DoctorCheck[]> {
  checkQueryable(db)
  const options = compileOptions('runDoctor', opts)
  // Its statements and the race's claims would run in the caller's transaction, and could abort it.
  const status = transactionStatus(db)
  if (status === 'T' || status === 'E') {
    refuse(
      'db',
      'a Pool or a client outside a transaction (runDoctor commits claims of its own)',
      'a client in a transaction',
    )
  }
  const { table, signal } = options
  const say = (message: string) => options.onProgress?.(message)
  const history = historyTableOf(table)
  const checks: DoctorCheck[] = []
  const add = (id: DoctorCheckId, verdict: Verdict) => checks.push({ id, ...verdict })
  const open = opener(db, options.connect)

  say('reading the server and session settings')
  const server = await one(db, serverFactsSql(), [])
  add('connection', judgeConnection(server))
  add('writable', judgeWritable(server))
  signal?.throwIfAborted()

  say(`reading the shape of ${table} and of ${history}`)
  const facts = await one(db, tableFactsSql(), tableFactsParams(table))
  // `history` in the facts also needs the lease table's column for it; this is the table alone.
  const historyExists = (await one(db, tableFactsSql(), tableFactsParams(history))).exists === true
  add('table', judgeTable(table, history, facts, historyExists))
  const granted = await rows(db, privilegesSql(), [quoteTable(table), quoteTable(history)])
  const privileges = judgePrivileges(table, history, String(server.role), facts.exists === true, granted)
  add('privileges', privileges.verdict)
  signal?.throwIfAborted()

  say(`timing ${CLOCK_SAMPLES} round trips against the database clock`)
  add('clock', await clockCheck(db, options.clockToleranceMs ?? CLOCK_TOLERANCE_MS))
  signal?.throwIfAborted()

  say('checking for a transaction pooler and prepared statements')
  const session = await sessionCheck(db, open)
  add('pooler', session.pooler)
  add('prepared', session.prepared)
  add('durability', judgeDurability(server))
  add('timeouts', judgeTimeouts(server))
  signal?.throwIfAborted()

  if (options.race !== false) {
    const blocked = raceBlocked(checks, privileges.canDelete, open === null, table)
    if (blocked !== null) add('race', blocked)
    else {
      // A pool lends no more clients than its max; asking for more would wait forever.
      const lent =
        options.connect === undefined ? Number((db as { options?: { max?: unknown } }).options?.max) : Number.NaN
      const n = lent >= 2 ? Math.min(options.race, lent) : options.race
      say(`racing ${n} connections for ${options.rounds} rounds on a job of the doctor's own`)
      add(
        'race',
        await race(db, open!, { table, history: historyExists ? history : null, n, rounds: options.rounds, signal }),
      )
    }
  }
  return checks
}

async function rows(db: Queryable, text: string, params: unknown[]): Promise<Row[]> {
  return ((await db.query(text, params)).rows ?? []) as Row[]
}

async function one(db: Queryable, text: string, params: unknown[]): Promise<Row> {
  return (await rows(db, text, params))[0] ?? {}
}

type Open = () => Promise<{ db: Queryable; close(): Promise<void> }>

// More connections: the caller's opener, else a pg Pool's own clients; null when there is neither.
function opener(db: Queryable, connect: (() => Promise<Queryable>) | undefined): Open | null {
  const pool = db as { connect?: () => Promise<Queryable>; totalCount?: unknown }
  const make = connect ?? (typeof pool.connect === 'function' && 'totalCount' in pool ? () => pool.connect!() : null)
  if (make === null) return null
  return async () => {
    const client = (await make()) as Queryable & { release?: () => unknown; end?: () => unknown }
    return {
      db: client,
      async close() {
        await (typeof client.release === 'function' ? client.release() : client.end?.())
      },
    }
  }
}

const SUPPORTED = 140000

export function judgeConnection(server: Row): Verdict {
  const version = `PostgreSQL ${String(server.version)}`
  const detail = `server_version_num ${String(server.version_num)}; supported: 14 and later`
  if (Number(server.version_num) >= SUPPORTED) return pass(`${version}, supported (14 and later)`, detail)
  return fail(
    `${version} is older than 14, the oldest supported`,
    detail,
    'upgrade the server to Postgres 14 or later (docs/compatibility.md#tested)',
  )
}

export function judgeWritable(server: Row): Verdict {
  const detail = `pg_is_in_recovery() ${String(server.in_recovery)}, transaction_read_only ${String(server.read_only)}`
  if (server.in_recovery === true) {
    return fail(
      'this server is a standby (pg_is_in_recovery() is true): no replica can claim here',
      detail,
      'point --url (or DATABASE_URL) at the primary, the writer endpoint (docs/high-availability.md#reconnecting-after-a-failover)',
    )
  }
  if (server.read_only === 'on') {
    return fail(
      'this session is read-only (transaction_read_only is on): no replica can claim here',
      detail,
      'connect to the primary as a role and database without default_transaction_read_only (docs/high-availability.md#reconnecting-after-a-failover)',
    )
  }
  return pass('a writable primary', detail)
}

export function judgeTable(table: string, history: string, facts: Row, historyExists: boolean): Verdict {
  const upgrade = `run \`${migrateCommand(table)}\``
  if (facts.exists !== true) {
    return fail(
      `${table} does not exist (or this role cannot see it)`,
      `to_regclass('${table}') is NULL`,
      `${upgrade} to create it (docs/migrations.md#the-table)`,
    )
  }
  const columns = Number(facts.columns)
  const detail = `${columns} columns, ${facts.current === true ? 'the current shape' : 'an older shape'}; history table ${history} ${historyExists ? 'present' : 'missing'}, ${facts.history === true ? 'in use' : 'not in use'}`
  if (facts.current !== true) {
    const what = columns === 4 ? 'the original 4-column shape' : `${columns} columns, not the current shape`
    return fail(
      `${table} has ${what}: claims go by the lease alone, occurrences are not kept and outcomes not recorded`,
      detail,
      `${upgrade} to upgrade it; replicas pick it up within a minute (docs/migrations.md#upgrading-an-older-table)`,
    )
  }
  if (facts.history !== true) {
    const what = historyExists
      ? `lacks the column its history table ${history} needs`
      : `its history table ${history} is missing`
    return warn(
      `${table} has the current shape, but ${what}: no run history is kept`,
      detail,
      `${upgrade} to ${historyExists ? 'add it' : 'create it'} (docs/migrations.md#the-table)`,
    )
  }
  return pass(`${table} has the current shape, and its history table ${history} is present`, detail)
}

export function judgePrivileges(
  table: string,
  history: string,
  role: string,
  exists: boolean,
  granted: Row[],
): { verdict: Verdict; canDelete: boolean } {
  const has = (kind: string, privilege: string) =>
    granted.some((g) => g.kind === kind && g.privilege === privilege && g.granted === true)
  const canDelete = has('lease', 'DELETE')
  if (!exists) {
    const verdict = warn(
      `not checked: ${table} does not exist`,
      'has_table_privilege needs the table',
      `run \`${migrateCommand(table)}\`, then run doctor again (docs/migrations.md#the-table)`,
    )
    return { verdict, canDelete }
  }
  const needs: [string, string, string[]][] = [['lease', table, ['SELECT', 'INSERT', 'UPDATE']]]
  if (granted.some((g) => g.kind === 'history'))
    needs.push(['history', history, ['SELECT', 'INSERT', 'UPDATE', 'DELETE']])
  const lacking = needs
    .map(([kind, name, privileges]) => ({ name, missing: privileges.filter((p) => !has(kind, p)) }))
    .filter((l) => l.missing.length > 0)
  const detail = needs.map(
    ([kind, name, ps]) => `${name}: ${ps.map((p) => `${p} ${has(kind, p) ? 'yes' : 'no'}`).join(', ')}`,
  )
  if (lacking.length === 0) {
    return {
      verdict: pass(
        `${role} may ${needs.map(([, name, ps]) => `${ps.join(', ')} on ${name}`).join('; ')}`,
        detail.join('; '),
      ),
      canDelete,
    }
  }
  const missing = lacking.map((l) => `${l.missing.join(', ')} on ${l.name}`).join('; ')
  const grants = lacking.map((l) => `GRANT ${l.missing.join(', ')} ON ${l.name} TO ${role};`).join(' ')
  const verdict = fail(
    `${role} lacks ${missing}: its claims ${lacking[0]!.name === table ? 'fail' : 'cannot record their runs'}`,
    detail.join('; '),
    `${grants} A role meant only to read (a monitor) cannot claim: check it with --no-race (runDoctor: race: false) (docs/operations.md#doctor)`,
  )
  return { verdict, canDelete }
}

async function clockCheck(db: Queryable, toleranceMs: number): Promise<Verdict> {
  let best: { offsetMs: number; roundTripMs: number } | undefined
  for (let i = 0; i < CLOCK_SAMPLES; i++) {
    const sentWallMs = Date.now()
    const at = (await one(db, databaseClockSql(), [])).at
    const receivedWallMs = Date.now()
    const offsetMs = typeof at === 'string' ? clockOffset(at, sentWallMs, receivedWallMs) : null
    const roundTripMs = receivedWallMs - sentWallMs
    // The shortest round trip leaves the least doubt about when the database read its clock.
    if (offsetMs !== null && (best === undefined || roundTripMs < best.roundTripMs)) best = { offsetMs, roundTripMs }
  }
  if (best === undefined)
    return warn('the database clock could not be read', '', 'run doctor again (docs/operations.md#doctor)')
  return judgeClock(best.offsetMs, best.roundTripMs, toleranceMs)
}

export function judgeClock(offsetMs: number, roundTripMs: number, toleranceMs: number): Verdict {
  const doubt = Math.ceil(roundTripMs / 2) + 1
  const way = offsetMs > 0 ? 'ahead of' : 'behind'
  const off = offsetMs === 0 ? 'reads the same as' : `is ${Math.abs(offsetMs)} ms ${way}`
  const summary = `this host's clock ${off} the database's (± ${doubt} ms)`
  const detail = `offset ${offsetMs} ms over the shortest of ${CLOCK_SAMPLES} round trips (${roundTripMs} ms); tolerance ${toleranceMs} ms`
  if (Math.abs(offsetMs) - doubt <= toleranceMs) return pass(summary, detail)
  const affects =
    offsetMs > 0
      ? 'its schedulers fire early: an occurrence it names lies past the claims\' tolerance ahead of the database clock, so its claims are refused as "too early" and it runs no occurrence'
      : 'its schedulers fire late, so its claims come late and lose to replicas with a correct clock'
  return warn(
    `${summary}, past the ${toleranceMs} ms tolerance of claims: ${affects}`,
    detail,
    "fix this host's time sync (NTP, chrony) (docs/failure-modes.md#occurrences)",
  )
}

// Two connections, interleaved: A marks its session and runs a named statement; B opens a transaction
// (under transaction pooling it takes the backend A just gave back); A runs the statement again.
// Without a pooler, A keeps its backend, its mark and its prepared statement.
async function sessionCheck(db: Queryable, open: Open | null): Promise<{ pooler: Verdict; prepared: Verdict }> {
  const a = open === null ? null : await open()
  const b =
    open === null
      ? null
      : await open().catch(async (error) => {
          await a?.close()
          throw error
        })
  try {
    const conn = a?.db ?? db
    const mark = randomBytes(6).toString('hex')
    const statement = { text: sessionProbeSql(), name: `pg_cron_lease_doctor_${mark}` }
    const seen = { pids: new Set<number>(), others: new Set<number>(), markLost: false, waited: false }
    await one(conn, markSessionSql(), [mark])
    // Three tries, as a pooler may hand B another idle backend; one wait is proof enough.
    for (let i = 0; i < 3 && !seen.waited; i++) {
      const first = (await runStatement(conn, statement, [], true)).rows?.[0] as Row
      if (b !== null) {
        await b.db.query('BEGIN', [])
        seen.others.add(Number((await one(b.db, sessionProbeSql(), [])).pid))
      }
      const sent = runStatement(conn, statement, [], true)
      // A pooler with one server connection makes A wait for B's transaction, which no server does.
      const settled = sent.then(
        () => false,
        () => false,
      )
      if (b !== null && (await Promise.race([settled, sleep(BLOCKED_MS, true, { ref: false })]))) seen.waited = true
      if (b !== null) await b.db.query('COMMIT', [])
      const second = (await sent).rows?.[0] as Row
      for (const row of [first, second]) {
        seen.pids.add(Number(row?.pid))
        if (row?.mark !== mark) seen.markLost = true
      }
    }
    const shared = [...seen.pids].filter((pid) => seen.others.has(pid))
    return {
      pooler: judgePooler({
        pids: [...seen.pids],
        shared,
        markLost: seen.markLost,
        waited: seen.waited,
        two: b !== null,
      }),
      prepared: judgePrepared(handleState(conn).sending?.named === true, handleState(conn).unprepared),
    }
  } finally {
    await Promise.allSettled([a?.close(), b?.close()])
  }
}

/** What the session check saw: `shared`, backends another connection had too; `waited`, A waited for B's transaction. */
interface Sessions {
  pids: number[]
  shared: number[]
  markLost: boolean
  waited: boolean
  two: boolean
}

export function judgePooler({ pids, shared, markLost, waited, two }: Sessions): Verdict {
  const detail =
    `backends seen by one connection: ${pids.join(', ')}; session state ${markLost ? 'lost' : 'kept'}` +
    (two ? `; backends also serving another connection: ${shared.join(', ') || 'none'}` : '; one connection only') +
    (waited ? `; it waited over ${BLOCKED_MS} ms for another connection's transaction` : '')
  if (pids.length === 1 && shared.length === 0 && !markLost && !waited) {
    return pass('no transaction pooling: each connection keeps its own backend and its session state', detail)
  }
  const signs = [
    pids.length > 1 && `reached ${pids.length} backends`,
    shared.length > 0 && 'shared a backend with another connection',
    markLost && 'lost its session state',
    waited && "waited for another connection's transaction",
  ].filter(Boolean)
  return warn(
    `transaction pooling: one connection's transactions ${signs.join(', ')}`,
    detail,
    "the library works through it: prepared statements fall back to unnamed ones, and a caller's transaction (a fence) must stay on one backend, so keep it within BEGIN … COMMIT on one client (docs/drivers.md#prepared-statements-and-pgbouncer)",
  )
}

export function judgePrepared(pg: boolean, refused: boolean): Verdict {
  if (!pg)
    return pass(
      'not a pg handle: statements are sent unnamed, so prepared statements play no part',
      'no named statement sent',
    )
  if (!refused)
    return pass('a named prepared statement round trip works here', 'prepared once, run again on the same connection')
  return warn(
    'named prepared statements are refused here: the library falls back to unnamed ones, a parse per claim',
    'run again on the same connection, the named statement was not found (a pooler moved the connection)',
    'nothing is needed; for the prepared path use PgBouncer 1.21 or later with max_prepared_statements, or connect past the pooler (docs/drivers.md#prepared-statements-and-pgbouncer)',
  )
}

export function judgeDurability(server: Row): Verdict {
  const commit = String(server.synchronous_commit)
  const names = String(server.synchronous_standby_names)
  const standbys = Number(server.standbys)
  const detail = `synchronous_commit ${commit}; synchronous_standby_names '${names}'; ${standbys} standby(s) streaming from this server`
  if (commit === 'off') {
    return warn(
      'synchronous_commit is off: a crash or a failover can lose a claim already reported won, and let its occurrence run twice',
      detail,
      'set synchronous_commit to on for the application role (ALTER ROLE … SET synchronous_commit = on) (docs/high-availability.md#never-turn-synchronous_commit-off)',
    )
  }
  if (standbys > 0 && (names === '' || commit === 'local')) {
    return warn(
      `no synchronous standby: ${standbys} standby(s) stream asynchronously, so a failover can lose a claim and let an occurrence run twice`,
      detail,
      'name a standby in synchronous_standby_names, with synchronous_commit on or remote_apply (docs/high-availability.md#settings)',
    )
  }
  if (standbys === 0) {
    return pass(
      `synchronous_commit ${commit}; no standby streams from this server, so no failover can lose a commit`,
      detail,
    )
  }
  return pass(`synchronous_commit ${commit}, with a synchronous standby (${names})`, detail)
}

const TIMEOUTS = ['statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout'] as const

export function judgeTimeouts(server: Row): Verdict {
  const set = TIMEOUTS.filter((name) => String(server[name]) !== '0')
  const detail = TIMEOUTS.map((name) => `${name} ${String(server[name])}`).join('; ')
  if (set.length === 0) return pass('no statement, lock or idle-in-transaction timeout', detail)
  return warn(
    `${set.map((name) => `${name} = ${String(server[name])}`).join(', ')}: it can cut a claim, a renew or a fence (a tick's open transaction) short`,
    detail,
    'set it to 0, or well above your longest tick, for the application role (ALTER ROLE … SET statement_timeout = 0) (docs/failure-modes.md#fenced-writes)',
  )
}

function raceBlocked(checks: DoctorCheck[], canDelete: boolean, noConnections: boolean, table: string): Verdict | null {
  const failed = checks.filter(
    (c) => c.status === 'fail' && (c.id === 'writable' || c.id === 'table' || c.id === 'privileges'),
  )
  const checkedTable = checks.find((c) => c.id === 'table')?.status
  if (failed.length > 0 || checkedTable === undefined) {
    const which = failed.map((c) => c.id).join(', ')
    return fail(
      `not run: the ${which} check${failed.length === 1 ? '' : 's'} failed, so no claim can win here`,
      'the race claims a job of its own, which needs a writable table and the privileges to claim',
      'fix the failures above, or check a role that may not write with --no-race (runDoctor: race: false) (docs/operations.md#doctor)',
    )
  }
  if (noConnections) {
    return warn(
      'not run: this handle opens no more connections',
      'a race needs connections of its own',
      'pass a pg Pool, or opts.connect to runDoctor (docs/operations.md#doctor)',
    )
  }
  if (!canDelete) {
    return warn(
      `not run: the race deletes its own row afterwards, and this role has no DELETE on ${table}`,
      'claims need no DELETE; only the race does',
      'run doctor as a role that may DELETE, or skip the race with --no-race (docs/operations.md#doctor)',
    )
  }
  return null
}

interface Race {
  table: string
  /** The history table, when it exists: rows of the doctor's job there are deleted too. */
  history: string | null
  n: number
  rounds: number
  signal: AbortSignal | undefined
}

async function race(db: Queryable, open: Open, { table, history, n, rounds, signal }: Race): Promise<Verdict> {
  const jobName = `pg-cron-lease:doctor:${randomBytes(8).toString('hex')}`
  const opened = await Promise.allSettled(Array.from({ length: n }, () => open()))
  const claimants = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []))
  // Doctor reports the clock itself; the claims' own warnings would only repeat it.
  const quiet = { warn() {} }
  try {
    const refused = opened.find((o) => o.status === 'rejected')
    if (refused !== undefined) throw (refused as PromiseRejectedResult).reason
    const tally = { single: 0, none: 0, many: 0 }
    for (let round = 0; round < rounds && !signal?.aborted; round++) {
      if (round > 0) await releaseLease(claimants[0]!.db, jobName, { table })
      const outcomes = await Promise.all(
        claimants.map((c, i) =>
          // Recorded as any run is (the lease row and the history): the whole path a tick takes.
          withCronLease(c.db, jobName, RACE_LEASE_MS, () => i, {
            table,
            holder: `pg-cron-lease doctor ${i}`,
            logger: quiet,
          }),
        ),
      )
      const winners = outcomes.filter((o) => o.ran).length
      if (winners === 1) tally.single++
      else if (winners === 0) tally.none++
      else tally.many++
    }
    // The lease is held now: every claim below loses, as most claims do.
    const lost: number[] = []
    const plain: number[] = []
    const loser = claimants[claimants.length - 1]!.db
    for (let i = 0; i < LATENCY_SAMPLES && !signal?.aborted; i++) {
      let start = performance.now()
      await withCronLease(loser, jobName, RACE_LEASE_MS, () => null, { table, logger: quiet })
      lost.push(performance.now() - start)
      start = performance.now()
      await loser.query('SELECT 1', [])
      plain.push(performance.now() - start)
    }
    signal?.throwIfAborted()
    return judgeRace({ ...tally, n, rounds, lostP50: median(lost), selectP50: median(plain) })
  } catch (error) {
    if (signal?.aborted) throw signal.reason
    return fail(
      `the race could not run: ${oneLine(error)}`,
      `job ${jobName}`,
      'fix the error above, then run doctor again (docs/operations.md#doctor)',
    )
  } finally {
    // Every claim has settled (each round is awaited), so nothing can write the job after this.
    await Promise.allSettled(claimants.map((c) => c.close()))
    await db.query(deleteJobSql(table), [jobName])
    if (history !== null) await db.query(deleteJobSql(history), [jobName])
  }
}

function oneLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).replace(/\s*\n\s*/g, ' ')
}

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

export function judgeRace(r: {
  single: number
  none: number
  many: number
  n: number
  rounds: number
  lostP50: number
  selectP50: number
}): Verdict {
  const ms = (v: number) => `${v.toFixed(2)} ms`
  const cost = `a losing claim's p50 ${ms(r.lostP50)}, ${(r.lostP50 / r.selectP50).toFixed(1)}× SELECT 1's ${ms(r.selectP50)}`
  const detail = `${r.n} connections, ${r.rounds} rounds: ${r.single} with one winner, ${r.none} with none, ${r.many} with more; ${cost}; its rows were deleted`
  if (r.single === r.rounds)
    return pass(`${r.rounds} rounds of ${r.n} connections, exactly one winner each; ${cost}`, detail)
  return fail(
    `${r.rounds - r.single} of ${r.rounds} rounds did not have exactly one winner (${r.many} with more, ${r.none} with none): the guarantee does not hold on this stack`,
    detail,
    'report it with this output, and do not rely on the lease here (docs/operations.md#doctor)',
  )
}
