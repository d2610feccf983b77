/** The doctor's race, and what every check shares: its connections, its queries, its verdicts (src/doctor.ts). */
import { randomBytes } from 'node:crypto'
import type { EventEmitter } from 'node:events'
import { releaseLease } from './admin.js'
import { oneLine } from './format-value.js'
import { withCronLease } from './lease.js'
import type { Compiled } from './options.js'
import { historyTableOf, quoteTable } from './sql.js'
import type { Queryable } from './types.js'

const LATENCY_SAMPLES = 20
const RACE_LEASE_MS = 60_000
// The race's bounds (a session's lower ones stay): a locked table fails the race in 2 s rather than hanging it.
const LOCK_WAIT_MS = 2000
const STATEMENT_MS = 10_000
// The setting that cut a claim, by its SQLSTATE; such a claim was rolled back.
const TIMED_OUT = new Map(Object.entries({ '55P03': 'lock_timeout', '57014': 'statement_timeout' }))
// A failure in one of these means no claim can win, so the race is not run.
const RACE_NEEDS = ['writable', 'table', 'privileges']

export type Row = Record<string, unknown>

/** What one check found, without its id. */
export interface Verdict {
  /** `warn`: the guarantee holds, weakened or at a cost; `fail`: it does not hold here. */
  status: 'pass' | 'warn' | 'fail'
  /** What was found, in one line. */
  summary: string
  /** The measurements behind it. */
  detail: string
  /** What to do, with a link into the docs; `null` on a pass. */
  fix: string | null
}

type Judged = (summary: string, detail: string, fix: string) => Verdict
export const pass = (summary: string, detail: string): Verdict => ({ status: 'pass', summary, detail, fix: null })
export const warn: Judged = (summary, detail, fix) => ({ status: 'warn', summary, detail, fix })
export const fail: Judged = (summary, detail, fix) => ({ status: 'fail', summary, detail, fix })

type Connection = { db: Queryable; close(): Promise<void> }
// `lent`: how many connections the doctor may hold at once: 0 when it can open none, a pool's max, else no limit.
export type Connections = { lent: number; open(bounded: boolean): Promise<Connection> }

export async function rows(db: Queryable, text: string, params: unknown[]): Promise<Row[]> {
  return ((await db.query(text, params)).rows ?? []) as Row[]
}

export async function one(db: Queryable, text: string, params: unknown[]): Promise<Row> {
  return (await rows(db, text, params))[0] ?? {}
}

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

type Held = Queryable &
  Partial<Pick<EventEmitter, 'on' | 'off'>> & { release?(error?: Error): unknown; end?(): unknown }

// The caller's opener, else a pg Pool's own clients, as many as its max: asking for more would wait forever.
export function opener(db: Queryable, connect: (() => Promise<Queryable>) | undefined): Connections {
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
  step(message: string): void
}

export async function raceCheck({ options, lent, open, done, tables, canDelete, step }: RaceInput): Promise<Verdict> {
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
  step(`racing ${n} connections for ${rounds} rounds on a job of the doctor's own`)
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
      wrote ||= outcomes.some((o) => o.status === 'fulfilled' || !TIMED_OUT.has(code(o.reason)))
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

// A claim cut by a timeout names the setting, and who holds a lock on the tables, if anyone does.
async function raceFailed(error: unknown, jobName: string, table: string, db: Queryable | undefined): Promise<Verdict> {
  const setting = TIMED_OUT.get(code(error))
  if (setting === undefined || db === undefined)
    return fail(
      `the race could not run: ${oneLine(error)}`,
      `job ${jobName}`,
      'fix the error above, then run doctor again (docs/operations.md#doctor)',
    )
  const params = [quoteTable(table), quoteTable(historyTableOf(table))]
  const holders = await rows(db, LOCK_HOLDERS_SQL, params).catch(() => [])
  const held = holders.map(
    (h) =>
      `pid ${h.pid} (${h.mode}, ${h.application_name || 'no application_name'}: ${String(h.query).replace(/\s*\n\s*/g, ' ')})`,
  )
  return fail(
    `the race could not run: a claim ran past ${setting} (SQLSTATE ${code(error)})${held.length > 0 ? `, waiting for the lock on ${table} held by ${held.join('; ')}` : ''}`,
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

const code = (error: unknown) => String((error as { code?: unknown } | null)?.code)

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
