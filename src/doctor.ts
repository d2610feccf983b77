/** `runDoctor`: what the guarantee depends on, checked where the application runs, and proved there by a race. */
import { randomBytes } from 'node:crypto'
import type { EventEmitter } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'
import { releaseLease } from './admin.js'
import { clockOffset } from './clock.js'
import { oneLine } from './format-value.js'
import { handleState } from './handle.js'
import { withCronLease } from './lease.js'
import { migrateCommand } from './log.js'
import { type Compiled, compileOptions } from './options.js'
import { codeOf, runStatement, transactionStatus } from './query.js'
import { historyTableOf, isoText, quoteTable, TABLE_FACTS_SQL, tableFactsParams } from './sql.js'
import type { Queryable } from './types.js'
import { checkQueryable, fail as refuse } from './validate.js'

// Every check, in the order it runs; the ids are stable (docs/operations.md#doctor).
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

/** What one check found, and what to do (`fix`) unless it passed. */
export interface DoctorCheck {
  id: DoctorCheckId
  /** `warn`: the guarantee holds, weakened or at a cost; `fail`: it does not hold here. */
  status: 'pass' | 'warn' | 'fail'
  /** What was found, in one line. */
  summary: string
  /** The measurements behind it. */
  detail: string
  /** What to do, with a link into the docs; `null` on a pass. */
  fix: string | null
}

/** Options for {@link runDoctor}. */
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
  /** Stops the doctor at its next check, or the race within its round (a claim waits at most 2 s for a lock); the race's rows are deleted before `runDoctor` rejects with the signal's reason. */
  signal?: AbortSignal
  /** Told what the doctor is doing, as it starts each step. */
  onProgress?: (message: string) => void
}

type Row = Record<string, unknown>
type Verdict = Omit<DoctorCheck, 'id'>

const pass = (summary: string, detail: string): Verdict => ({ status: 'pass', summary, detail, fix: null })
const warn = (summary: string, detail: string, fix: string): Verdict => ({ status: 'warn', summary, detail, fix })
const fail = (summary: string, detail: string, fix: string): Verdict => ({ status: 'fail', summary, detail, fix })

const rows = async (db: Queryable, text: string, params: unknown[]) =>
  ((await db.query(text, params)).rows ?? []) as Row[]
const one = async (db: Queryable, text: string, params: unknown[]): Promise<Row> =>
  (await rows(db, text, params))[0] ?? {}

const CLOCK_TOLERANCE_MS = 5000
const CLOCK_SAMPLES = 5
// Far longer than a SELECT takes on a loaded server, however busy.
const BLOCKED_MS = 3000

/**
 * Runs every check against `db`; a fault found is a check's `fail`. It rejects only when the database cannot be
 * reached, `signal` aborts, or the race's job (`pg-cron-lease:doctor:<random>`, no other row) could not be deleted.
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
  const rule = 'a Pool or a client outside a transaction (runDoctor commits claims of its own)'
  if (status === 'T' || status === 'E') refuse('db', rule, 'a client in a transaction')
  const { table, signal } = options
  const history = historyTableOf(table)
  // Each read is a step the signal can stop the doctor before.
  const step = (message: string) => {
    signal?.throwIfAborted()
    options.onProgress?.(message)
  }
  const checks: DoctorCheck[] = []
  const add = (id: DoctorCheckId, verdict: Verdict) => checks.push({ id, ...verdict })

  step('reading the server and session settings')
  const server = await one(db, SERVER_FACTS_SQL, [])
  const role = String(server.role)
  add('connection', judgeConnection(server))
  add('writable', judgeWritable(server))

  step(`reading the shape of ${table} and of ${history}`)
  // Without USAGE on the schema, naming a table in it is an error: read the schema's grant first.
  const schema = table.includes('.') ? table.slice(0, table.indexOf('.')) : ''
  const hidden = schema !== '' && (await one(db, SCHEMA_USAGE_SQL, [schema])).usage === false
  const facts = hidden ? {} : await one(db, TABLE_FACTS_SQL, tableFactsParams(table))
  const granted = hidden ? [] : await rows(db, PRIVILEGES_SQL, [quoteTable(table), quoteTable(history)])
  const privileges = judgePrivileges(table, history, role, granted, options.race === false)
  add('table', hidden ? judgeHidden(table, schema, role) : judgeTable(table, history, facts))
  add('privileges', hidden ? judgeSchemaUsage(table, schema, role) : privileges.verdict)

  step(`timing ${CLOCK_SAMPLES} round trips against the database clock`)
  add('clock', await clockCheck(db, options.clockToleranceMs ?? CLOCK_TOLERANCE_MS))

  step('checking for a transaction pooler and prepared statements')
  const connections = opener(db, options.connect)
  const { pooler, prepared } = await sessionCheck(db, connections)
  add('pooler', pooler)
  add('prepared', prepared)
  add('durability', judgeDurability(server))
  add('timeouts', judgeTimeouts(server))

  signal?.throwIfAborted()
  if (options.race === false) return checks
  const tables = facts.history_table === true ? [table, history] : [table]
  add('race', await raceCheck({ options, ...connections, done: checks, tables, canDelete: privileges.canDelete }))
  return checks
}

const TIMEOUTS = ['statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout'] as const
const SCHEMA_USAGE_SQL = `SELECT has_schema_privilege(oid, 'USAGE') AS usage FROM pg_namespace WHERE nspname = $1::text`
const SERVER_FACTS_SQL = `SELECT current_setting('server_version_num')::int AS version_num, current_user AS role,
  current_setting('server_version') AS version,
  pg_is_in_recovery() AS in_recovery,
  current_setting('transaction_read_only') AS read_only,
  current_setting('synchronous_commit') AS synchronous_commit,
  current_setting('synchronous_standby_names') AS synchronous_standby_names,
  (SELECT count(*) FROM pg_stat_replication)::int AS standbys,
  ${TIMEOUTS.map((name) => `current_setting('${name}') AS ${name}`).join(',\n  ')}`
const PRIVILEGES_SQL = `SELECT relation.kind, privilege, has_table_privilege(relation.oid, privilege) AS granted
FROM (VALUES ('lease', to_regclass($1::text)), ('history', to_regclass($2::text))) AS relation (kind, oid)
  CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS privilege
WHERE relation.oid IS NOT NULL`
const DATABASE_CLOCK_SQL = `SELECT ${isoText('clock_timestamp()')} AS at`
const SESSION_PROBE_SQL = `SELECT pg_backend_pid() AS pid, current_setting('pg_cron_lease.doctor', true) AS mark`
// A session's mark, not a transaction's: a pooler that moves the connection loses it.
const MARK_SESSION_SQL = `SELECT set_config('pg_cron_lease.doctor', $1::text, false) AS mark`

export function judgeConnection(server: Row): Verdict {
  const version = `PostgreSQL ${String(server.version)}`
  const detail = `server_version_num ${String(server.version_num)}; supported: 14 and later`
  if (Number(server.version_num) >= 140000) return pass(`${version}, supported (14 and later)`, detail)
  return fail(
    `${version} is older than 14, the oldest supported`,
    detail,
    'upgrade the server to Postgres 14 or later (docs/compatibility.md#tested)',
  )
}

export function judgeWritable(server: Row): Verdict {
  const detail = `pg_is_in_recovery() ${String(server.in_recovery)}, transaction_read_only ${String(server.read_only)}`
  if (server.in_recovery === true)
    return fail(
      'this server is a standby (pg_is_in_recovery() is true): no replica can claim here',
      detail,
      'point --url (or DATABASE_URL) at the primary, the writer endpoint (docs/high-availability.md#reconnecting-after-a-failover)',
    )
  if (server.read_only === 'on')
    return fail(
      'this session is read-only (transaction_read_only is on): no replica can claim here',
      detail,
      'connect to the primary as a role and database without default_transaction_read_only (docs/high-availability.md#reconnecting-after-a-failover)',
    )
  return pass('a writable primary', detail)
}

export function judgeTable(table: string, history: string, facts: Row): Verdict {
  const upgrade = `run \`${migrateCommand(table)}\``
  if (facts.exists !== true)
    return fail(
      `${table} does not exist (or this role cannot see it)`,
      `to_regclass('${table}') is NULL`,
      `${upgrade} to create it (docs/migrations.md#the-table)`,
    )
  // The history table alone: `history_shape` also needs the lease table's column for it.
  const historyExists = facts.history_table === true
  const columns = Number(facts.columns)
  const detail = `${columns} columns, ${facts.current === true ? 'the current shape' : 'an older shape'}; history table ${history} ${historyExists ? 'present' : 'missing'}, ${facts.history_shape === true ? 'in use' : 'not in use'}`
  if (facts.current !== true) {
    const what = columns === 4 ? 'the original 4-column shape' : `${columns} columns, not the current shape`
    return fail(
      `${table} has ${what}: claims go by the lease alone, occurrences are not kept and outcomes not recorded`,
      detail,
      `${upgrade} to upgrade it; replicas pick it up within a minute (docs/migrations.md#upgrading-an-older-table)`,
    )
  }
  if (facts.history_shape === true)
    return pass(`${table} has the current shape, and its history table ${history} is present`, detail)
  const what = historyExists
    ? `lacks the column its history table ${history} needs`
    : `its history table ${history} is missing`
  return warn(
    `${table} has the current shape, but ${what}: no run history is kept`,
    detail,
    `${upgrade} to ${historyExists ? 'add it' : 'create it'} (docs/migrations.md#the-table)`,
  )
}

// The table check, when the role cannot see into the table's schema: the privileges check names the GRANT.
function judgeHidden(table: string, schema: string, role: string): Verdict {
  return warn(
    `not checked: ${role} has no USAGE on schema ${schema}, so it cannot see ${table}`,
    `has_schema_privilege('${schema}', 'USAGE') is false`,
    'grant it as the privileges check says, then run doctor again (docs/operations.md#doctor)',
  )
}

// Every identifier quoted, whatever it holds, so that a GRANT runs as printed.
const quoteName = (name: string) => `"${name.replaceAll('"', '""')}"`
const grant = (privileges: string[], table: string, role: string) =>
  `GRANT ${privileges.join(', ')} ON ${quoteTable(table)} TO ${quoteName(role)};`

// What `role` may do on the tables; `reading` (`race: false`) needs only a monitor's SELECT: not claiming is a warning.
export function judgePrivileges(table: string, history: string, role: string, granted: Row[], reading = false) {
  const has = (kind: string, privilege: string) =>
    granted.some((g) => g.kind === kind && g.privilege === privilege && g.granted === true)
  const needs: [string, string, string[]][] = [['lease', table, ['SELECT', 'INSERT', 'UPDATE']]]
  if (granted.some((g) => g.kind === 'history'))
    needs.push(['history', history, ['SELECT', 'INSERT', 'UPDATE', 'DELETE']])
  const lacking = needs
    .map(([kind, name, privileges]) => ({ name, missing: privileges.filter((p) => !has(kind, p)) }))
    .filter((l) => l.missing.length > 0)
  const unreadable = lacking.filter((l) => l.missing.includes('SELECT')).map((l) => l.name)
  const detail = needs
    .map(([kind, name, ps]) => `${name}: ${ps.map((p) => `${p} ${has(kind, p) ? 'yes' : 'no'}`).join(', ')}`)
    .join('; ')
  const grants = lacking.map((l) => grant(l.missing, l.name, role)).join(' ')
  const missing = lacking.map((l) => `${l.missing.join(', ')} on ${l.name}`).join('; ')
  const monitor = 'A role meant only to read (a monitor) needs SELECT on both tables alone'
  const verdict = (): Verdict => {
    // PRIVILEGES_SQL has rows only for the tables that exist.
    if (!granted.some((g) => g.kind === 'lease'))
      return warn(
        `not checked: ${table} does not exist`,
        'has_table_privilege needs the table',
        `run \`${migrateCommand(table)}\`, then run doctor again (docs/migrations.md#the-table)`,
      )
    if (lacking.length === 0)
      return pass(`${role} may ${needs.map(([, n, ps]) => `${ps.join(', ')} on ${n}`).join('; ')}`, detail)
    if (reading && unreadable.length === 0)
      return warn(
        `${role} may read (SELECT) ${needs.map(([, n]) => n).join(' and ')}, all that status, check and history need, but lacks ${missing}: it cannot claim`,
        detail,
        `nothing, for a monitor; a role that runs jobs needs ${grants} (docs/operations.md#doctor)`,
      )
    if (reading)
      return fail(
        `${role} lacks ${unreadable.map((name) => `SELECT on ${name}`).join('; ')}: it cannot read the leases and runs`,
        detail,
        `${unreadable.map((name) => grant(['SELECT'], name, role)).join(' ')} ${monitor} (docs/operations.md#doctor)`,
      )
    return fail(
      `${role} lacks ${missing}: its claims ${lacking[0]!.name === table ? 'fail' : 'cannot record their runs'}`,
      detail,
      `${grants} ${monitor}: check it with --no-race (runDoctor: race: false) (docs/operations.md#doctor)`,
    )
  }
  return { verdict: verdict(), canDelete: has('lease', 'DELETE') }
}

export function judgeSchemaUsage(table: string, schema: string, role: string): Verdict {
  return fail(
    `${role} has no USAGE on schema ${schema}: it cannot reach ${table}, so its claims fail`,
    `has_schema_privilege('${schema}', 'USAGE') is false`,
    `GRANT USAGE ON SCHEMA ${quoteName(schema)} TO ${quoteName(role)}; then run doctor again for the table's own privileges (docs/operations.md#doctor)`,
  )
}

async function clockCheck(db: Queryable, toleranceMs: number): Promise<Verdict> {
  let best: { offsetMs: number; roundTripMs: number } | undefined
  for (let i = 0; i < CLOCK_SAMPLES; i++) {
    const sentWallMs = Date.now()
    const at = (await one(db, DATABASE_CLOCK_SQL, [])).at
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

// A marks its session and runs a named statement, B opens a transaction (behind a pooler, on A's backend), A reruns it.
async function sessionCheck(db: Queryable, { lent, open }: Connections) {
  const a = lent >= 1 ? await open(false) : null
  let b: typeof a = null
  try {
    if (lent >= 2) b = await open(false)
    const conn = a?.db ?? db
    const mark = randomBytes(6).toString('hex')
    const statement = { text: SESSION_PROBE_SQL, name: `pg_cron_lease_doctor_${mark}` }
    const probe = async () => (await runStatement(conn, statement, [], true)).rows?.[0] as Row | undefined
    const seen: (Row | undefined)[] = []
    const others = new Set<number>()
    let waited = false
    await one(conn, MARK_SESSION_SQL, [mark])
    // Three tries, as a pooler may hand B another idle backend; one wait is proof enough.
    for (let i = 0; i < 3 && !waited; i++) {
      seen.push(await probe())
      if (b !== null) {
        await b.db.query('BEGIN', [])
        others.add(Number((await one(b.db, SESSION_PROBE_SQL, [])).pid))
      }
      const second = probe()
      if (b !== null) {
        // A pooler with one server connection makes A wait for B's transaction, which no server does.
        const settled = second.then(() => false).catch(() => false)
        waited = await Promise.race([settled, sleep(BLOCKED_MS, true, { ref: false })])
        await b.db.query('COMMIT', [])
      }
      seen.push(await second)
    }
    const pids = [...new Set(seen.map((row) => Number(row?.pid)))]
    const markLost = seen.some((row) => row?.mark !== mark)
    const { sending, unprepared } = handleState(conn)
    return {
      pooler: judgePooler({ pids, shared: pids.filter((pid) => others.has(pid)), markLost, waited, two: b !== null }),
      prepared: judgePrepared(sending?.named === true, unprepared),
    }
  } finally {
    await Promise.allSettled([a?.close(), b?.close()])
  }
}

// What the session check saw: `shared`, backends another connection had too; `waited`, A waited for B's transaction.
type Sessions = { pids: number[]; shared: number[]; markLost: boolean; waited: boolean; two: boolean }

export function judgePooler({ pids, shared, markLost, waited, two }: Sessions): Verdict {
  const detail =
    `backends seen by one connection: ${pids.join(', ')}; session state ${markLost ? 'lost' : 'kept'}` +
    (two ? `; backends also serving another connection: ${shared.join(', ') || 'none'}` : '; one connection only') +
    (waited ? `; it waited over ${BLOCKED_MS} ms for another connection's transaction` : '')
  const signs = [
    pids.length > 1 && `reached ${pids.length} backends`,
    shared.length > 0 && 'shared a backend with another connection',
    markLost && 'lost its session state',
    waited && "waited for another connection's transaction",
  ].filter(Boolean)
  if (signs.length === 0)
    return pass('no transaction pooling: each connection keeps its own backend and its session state', detail)
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
  if (commit === 'off')
    return warn(
      'synchronous_commit is off: a crash or a failover can lose a claim already reported won, and let its occurrence run twice',
      detail,
      'set synchronous_commit to on for the application role (ALTER ROLE … SET synchronous_commit = on) (docs/high-availability.md#never-turn-synchronous_commit-off)',
    )
  if (standbys === 0)
    return pass(
      `synchronous_commit ${commit}; no standby streams from this server, so no failover can lose a commit`,
      detail,
    )
  if (names === '' || commit === 'local')
    return warn(
      `no synchronous standby: ${standbys} standby(s) stream asynchronously, so a failover can lose a claim and let an occurrence run twice`,
      detail,
      'name a standby in synchronous_standby_names, with synchronous_commit on or remote_apply (docs/high-availability.md#settings)',
    )
  return pass(`synchronous_commit ${commit}, with a synchronous standby (${names})`, detail)
}

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

const LATENCY_SAMPLES = 20
const RACE_LEASE_MS = 60_000
// The race's bounds (a session's lower ones stay): a locked table fails the race in 2 s rather than hanging it.
const LOCK_WAIT_MS = 2000
const STATEMENT_MS = 10_000
const TIMED_OUT = new Map<unknown, string>(Object.entries({ '55P03': 'lock_timeout', '57014': 'statement_timeout' }))
// A failure in one of these means no claim can win, so the race is not run.
const RACE_NEEDS = ['writable', 'table', 'privileges']

// Lowers the session's lock_timeout and statement_timeout to the doctor's (0 is none); returns them as they were.
const BOUND_SQL = `WITH was AS MATERIALIZED (SELECT name, setting FROM pg_settings WHERE name IN ('lock_timeout', 'statement_timeout'))
SELECT name, setting, set_config(name, least(nullif(setting::int, 0),
  CASE name WHEN 'lock_timeout' THEN $1::int ELSE $2::int END)::text, false) AS bounded FROM was`
const RESTORE_SQL = `SELECT set_config(name, setting, false) FROM unnest($1::text[], $2::text[]) AS was (name, setting)`
// Who holds a lock on the tables that a claim's ROW EXCLUSIVE waits for (a plain CREATE INDEX holds SHARE).
const LOCK_HOLDERS_SQL = `SELECT held.pid, held.mode, activity.application_name, left(activity.query, 80) AS query
FROM pg_locks AS held JOIN pg_stat_activity AS activity ON activity.pid = held.pid
WHERE held.locktype = 'relation' AND held.granted AND held.pid <> pg_backend_pid()
  AND held.relation IN (to_regclass($1::text), to_regclass($2::text))
  AND held.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
ORDER BY held.pid`
const COUNT_JOB_SQL = (table: string) => `SELECT count(*)::int AS n FROM ${quoteTable(table)} WHERE job_name = $1::text`
const DELETE_JOB_SQL = (table: string) => `DELETE FROM ${quoteTable(table)} WHERE job_name = $1::text`

type Connection = { db: Queryable; close(): Promise<void> }
// `lent`: how many connections the doctor may hold at once: 0 when it can open none, a pool's max, else no limit.
type Connections = { lent: number; open(bounded: boolean): Promise<Connection> }

type Held = Queryable &
  Partial<Pick<EventEmitter, 'on' | 'off'>> & { release?(error?: Error): unknown; end?(): unknown }

// The caller's opener, else a pg Pool's own clients, as many as its max: asking for more would wait forever.
function opener(db: Queryable, connect: (() => Promise<Queryable>) | undefined): Connections {
  const pool = db as { connect?: () => Promise<Queryable>; totalCount?: unknown; options?: { max?: unknown } }
  const make = connect ?? (typeof pool.connect === 'function' && 'totalCount' in pool ? () => pool.connect!() : null)
  const max = Number(pool.options?.max)
  return {
    lent: make === null ? 0 : connect === undefined && max >= 1 ? max : Number.POSITIVE_INFINITY,
    async open(bounded) {
      const client = (await make!()) as Held
      // A pool's client has no listener while lent: a connection lost then would crash the process.
      let lost: Error | undefined
      const onError = (error: Error) => (lost = error)
      client.on?.('error', onError)
      let was: Row[] = []
      const close = async () => {
        if (was.length > 0 && lost === undefined)
          await rows(client, RESTORE_SQL, [was.map((w) => w.name), was.map((w) => w.setting)]).catch(onError)
        // A client that failed goes back with its error, so that the pool drops it.
        await (typeof client.release === 'function' ? client.release(lost) : client.end?.())
        client.off?.('error', onError)
      }
      if (bounded)
        was = await rows(client, BOUND_SQL, [LOCK_WAIT_MS, STATEMENT_MS]).catch(async (error) => {
          onError(error)
          await close()
          throw error
        })
      return { db: client, close }
    },
  }
}

interface RaceInput extends Connections {
  options: Compiled
  done: { id: string; status: string }[]
  tables: string[]
  canDelete: boolean
}

async function raceCheck({ options, lent, open, done, tables, canDelete }: RaceInput): Promise<Verdict> {
  const { table, rounds, signal } = options
  const blocking = done.filter((c) => c.status === 'fail' && RACE_NEEDS.includes(c.id)).map((c) => c.id)
  if (blocking.length > 0)
    return fail(
      `not run: the ${blocking.join(', ')} check${blocking.length === 1 ? '' : 's'} failed, so no claim can win here`,
      'the race claims a job of its own, which needs a writable table and the privileges to claim',
      'fix the failures above, or check a role that may not write with --no-race (runDoctor: race: false) (docs/operations.md#doctor)',
    )
  if (lent < 2)
    return warn(
      `not run: ${lent === 0 ? 'this handle opens no more connections' : 'this pool lends one connection (max: 1)'}`,
      'a race needs connections of its own',
      'pass a pg Pool of max 2 or more, or opts.connect to runDoctor (docs/operations.md#doctor)',
    )
  if (!canDelete)
    return warn(
      `not run: the race deletes its own row afterwards, and this role has no DELETE on ${table}`,
      'claims need no DELETE; only the race does',
      'run doctor as a role that may DELETE, or skip the race with --no-race (docs/operations.md#doctor)',
    )
  const n = Math.min(options.race as number, lent)
  options.onProgress?.(`racing ${n} connections for ${rounds} rounds on a job of the doctor's own`)
  const jobName = `pg-cron-lease:doctor:${randomBytes(8).toString('hex')}`
  // Behind a transaction pooler a session's timeouts would stay on a server connection others use.
  const bounded = done.some((c) => c.id === 'pooler' && c.status === 'pass')
  const opened = await Promise.allSettled(Array.from({ length: n }, () => open(bounded)))
  const claimants = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []))
  // Doctor reports the clock itself; the claims' own warnings would only repeat it.
  const logger = { warn() {} }
  const failed = { none: [] as number[], many: [] as number[] }
  let wrote = false
  let verdict: Verdict | undefined
  try {
    for (const o of opened) if (o.status === 'rejected') throw o.reason
    for (let round = 1; round <= rounds && !signal?.aborted; round++) {
      if (round > 1) await releaseLease(claimants[0]!.db, jobName, { table })
      // All settle before the round ends, so none writes after the cleanup; each records its run, as a tick does.
      const outcomes = await Promise.allSettled(
        claimants.map((c, i) =>
          withCronLease(c.db, jobName, RACE_LEASE_MS, () => i, { table, holder: `pg-cron-lease doctor ${i}`, logger }),
        ),
      )
      // A claim cut by a timeout was rolled back: only another outcome can have written the job.
      wrote ||= outcomes.some((o) => o.status === 'fulfilled' || !TIMED_OUT.has(codeOf(o.reason)))
      for (const o of outcomes) if (o.status === 'rejected') throw o.reason
      const winners = outcomes.filter((o) => o.status === 'fulfilled' && o.value.ran).length
      if (winners !== 1) failed[winners === 0 ? 'none' : 'many'].push(round)
    }
    // The lease is held now: every claim below loses, as most claims do.
    const loser = claimants.at(-1)!.db
    const lose = () => withCronLease(loser, jobName, RACE_LEASE_MS, () => null, { table, logger })
    const [lostP50, selectP50] = (await medians([lose, () => loser.query('SELECT 1', [])], signal)) as [number, number]
    verdict = judgeRace({ n, rounds, failed, lostP50, selectP50 })
  } catch (error) {
    if (!signal?.aborted) verdict = await raceFailed(error, jobName, table, claimants[0]?.db)
  }
  await Promise.allSettled(claimants.map((c) => c.close()))
  if (wrote) await cleanUp(await open(bounded), tables, jobName)
  signal?.throwIfAborted()
  return verdict!
}

// Each query's median time, the queries taken in turn so that every one sees the same load.
async function medians(queries: (() => unknown)[], signal: AbortSignal | undefined): Promise<number[]> {
  const times = queries.map((): number[] => [])
  for (let i = 0; i < LATENCY_SAMPLES && !signal?.aborted; i++) {
    for (const [q, query] of queries.entries()) {
      const start = performance.now()
      await query()
      times[q]!.push(performance.now() - start)
    }
  }
  return times.map((t) => t.sort((x, y) => x - y)[Math.floor(t.length / 2)] ?? Number.NaN)
}

async function raceFailed(error: unknown, jobName: string, table: string, db: Queryable | undefined): Promise<Verdict> {
  const setting = TIMED_OUT.get(codeOf(error))
  if (setting === undefined || db === undefined)
    return fail(
      `the race could not run: ${oneLine(error)}`,
      `job ${jobName}`,
      'fix the error above, then run doctor again (docs/operations.md#doctor)',
    )
  const params = [quoteTable(table), quoteTable(historyTableOf(table))]
  const held = (await rows(db, LOCK_HOLDERS_SQL, params).catch(() => [])).map(
    (h) =>
      `pid ${h.pid} (${h.mode}, ${h.application_name || 'no application_name'}: ${String(h.query).replace(/\s*\n\s*/g, ' ')})`,
  )
  return fail(
    `the race could not run: a claim ran past ${setting} (SQLSTATE ${codeOf(error)})${held.length > 0 ? `, waiting for the lock on ${table} held by ${held.join('; ')}` : ''}`,
    `job ${jobName}; each statement of the doctor waits at most ${LOCK_WAIT_MS} ms for a lock and runs at most ${STATEMENT_MS} ms (less when the session says so)`,
    'run doctor again once the lock is released: a plain CREATE INDEX holds SHARE on the table until it ends, CREATE INDEX CONCURRENTLY does not; a statement_timeout that cuts a claim is too short (docs/operations.md#doctor)',
  )
}

// On a connection of its own, as the claimants' may be broken; rows a lock kept are named with their DELETE.
async function cleanUp(c: Connection, tables: string[], jobName: string) {
  try {
    for (const t of tables) {
      await rows(c.db, DELETE_JOB_SQL(t), [jobName]).catch(async (error) => {
        const left = await one(c.db, COUNT_JOB_SQL(t), [jobName]).catch(() => ({ n: 1 }))
        if (Number(left.n) === 0) return
        const deletes = tables.map((x) => `DELETE FROM ${quoteTable(x)} WHERE job_name = '${jobName}';`).join(' ')
        const message = `pg-cron-lease: the rows of the doctor's job ${jobName} could not be deleted (${oneLine(error)}); delete them with: ${deletes}`
        throw new Error(message, { cause: error })
      })
    }
  } finally {
    await c.close()
  }
}

// `failed`: the rounds, numbered from 1, that had no winner or more than one.
type Tally = Record<'n' | 'rounds' | 'lostP50' | 'selectP50', number> & { failed: Record<'none' | 'many', number[]> }

export function judgeRace({ n, rounds, lostP50, selectP50, failed }: Tally): Verdict {
  const [none, many] = [failed.none.length, failed.many.length]
  const ms = (v: number) => `${v.toFixed(2)} ms`
  const cost = `a losing claim's p50 ${ms(lostP50)}, ${(lostP50 / selectP50).toFixed(1)}× SELECT 1's ${ms(selectP50)}`
  const which = (label: string, list: number[]) =>
    list.length === 0 ? [] : [`${label} ${list.length === 1 ? 'round' : 'rounds'} ${list.join(', ')}`]
  const named = [...which('more than one winner in', failed.many), ...which('no winner in', failed.none)].join('; ')
  const detail = `${n} connections, ${rounds} rounds: ${rounds - none - many} with one winner, ${none} with none, ${many} with more${named === '' ? '' : ` (${named})`}; ${cost}; its rows were deleted`
  if (none + many === 0) return pass(`${rounds} rounds of ${n} connections, exactly one winner each; ${cost}`, detail)
  return fail(
    `${none + many} of ${rounds} rounds did not have exactly one winner (${many} with more, ${none} with none: ${named}): the guarantee does not hold on this stack`,
    detail,
    'report it with this output, and do not rely on the lease here (docs/operations.md#doctor)',
  )
}
