/** The doctor's race, and what every check shares: its connections, its queries, its verdicts (src/doctor.ts). */
import { randomBytes } from 'node:crypto'
import { releaseLease } from './admin.js'
import { oneLine } from './format-value.js'
import { withCronLease } from './lease.js'
import type { Compiled } from './options.js'
import { quoteTable } from './sql.js'
import type { Queryable } from './types.js'

const LATENCY_SAMPLES = 20
const RACE_LEASE_MS = 60_000
// The race's connections' bounds (a session's lower ones stay): a table locked by a plain CREATE INDEX
// fails the race in 2 s rather than hanging it, and an interrupt is answered as soon.
const LOCK_WAIT_MS = 2000
const STATEMENT_MS = 10_000
// The setting that cut a claim, by its SQLSTATE; such a claim was rolled back.
const TIMED_OUT = new Map([
  ['55P03', 'lock_timeout'],
  ['57014', 'statement_timeout'],
])
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

export const pass = (summary: string, detail: string): Verdict => ({ status: 'pass', summary, detail, fix: null })
const verdict =
  (status: Verdict['status']) =>
  (summary: string, detail: string, fix: string): Verdict => ({ status, summary, detail, fix })
export const warn = verdict('warn')
export const fail = verdict('fail')

export type Open = (bounded: boolean) => Promise<{ db: Queryable; close(): Promise<void> }>

/** What the race is given: the doctor's connections, and what the checks before it found. */
interface RaceInput {
  options: Compiled
  table: string
  history: string
  say(message: string): void
  open: Open | null
  /** How many connections the doctor may hold at once: a pool's max, else no limit. */
  lent: number
  done: { id: string; status: string }[]
  canDelete: boolean
  historyExists: boolean
}

export async function rows(db: Queryable, text: string, params: unknown[]): Promise<Row[]> {
  return ((await db.query(text, params)).rows ?? []) as Row[]
}

export async function one(db: Queryable, text: string, params: unknown[]): Promise<Row> {
  return (await rows(db, text, params))[0] ?? {}
}

// Lowers the session's lock_timeout and statement_timeout to the doctor's bounds (0 is none), and
// returns what they were, for RESTORE_SQL.
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

type Held = Queryable & {
  release?: (error?: Error) => unknown
  end?: () => unknown
  on?: (event: 'error', listener: (error: Error) => void) => unknown
  off?: (event: 'error', listener: (error: Error) => void) => unknown
}

// More connections: the caller's opener, else a pg Pool's own clients; null when there is neither.
// A bounded one has the doctor's lock and statement timeouts, put back as they were on close.
export function opener(db: Queryable, connect: (() => Promise<Queryable>) | undefined): Open | null {
  const pool = db as { connect?: () => Promise<Queryable>; totalCount?: unknown }
  const make = connect ?? (typeof pool.connect === 'function' && 'totalCount' in pool ? () => pool.connect!() : null)
  if (make === null) return null
  return async (bounded) => {
    const client = (await make()) as Held
    // A pool's client has no listener while lent: a connection lost then would crash the process.
    let lost: Error | undefined
    const onError = (error: Error) => (lost = error)
    client.on?.('error', onError)
    let was: Row[] = []
    const close = async () => {
      if (was.length > 0 && lost === undefined) {
        const put = [was.map((w) => w.name), was.map((w) => w.setting)]
        await rows(client, RESTORE_SQL, put).catch(onError)
      }
      // A client that failed goes back with its error, so that the pool drops it.
      await (typeof client.release === 'function' ? client.release(lost) : client.end?.())
      client.off?.('error', onError)
    }
    try {
      if (bounded) was = await rows(client, BOUND_SQL, [LOCK_WAIT_MS, STATEMENT_MS])
    } catch (error) {
      onError(error as Error)
      await close()
      throw error
    }
    return { db: client, close }
  }
}

export async function raceCheck(r: RaceInput): Promise<Verdict> {
  const failed = r.done.filter((c) => c.status === 'fail' && RACE_NEEDS.includes(c.id)).map((c) => c.id)
  if (failed.length > 0)
    return fail(
      `not run: the ${failed.join(', ')} check${failed.length === 1 ? '' : 's'} failed, so no claim can win here`,
      'the race claims a job of its own, which needs a writable table and the privileges to claim',
      'fix the failures above, or check a role that may not write with --no-race (runDoctor: race: false) (docs/operations.md#doctor)',
    )
  if (r.open === null || r.lent < 2) {
    const why = r.open === null ? 'this handle opens no more connections' : 'this pool lends one connection (max: 1)'
    return warn(
      `not run: ${why}`,
      'a race needs connections of its own',
      'pass a pg Pool of max 2 or more, or opts.connect to runDoctor (docs/operations.md#doctor)',
    )
  }
  if (!r.canDelete)
    return warn(
      `not run: the race deletes its own row afterwards, and this role has no DELETE on ${r.table}`,
      'claims need no DELETE; only the race does',
      'run doctor as a role that may DELETE, or skip the race with --no-race (docs/operations.md#doctor)',
    )
  const n = Math.min(r.options.race as number, r.lent)
  r.say(`racing ${n} connections for ${r.options.rounds} rounds on a job of the doctor's own`)
  return race(r, n)
}

async function race(r: RaceInput, n: number): Promise<Verdict> {
  const { table, options } = r
  const { rounds, signal } = options
  const jobName = `pg-cron-lease:doctor:${randomBytes(8).toString('hex')}`
  // Behind a transaction pooler a session's timeouts would stay on a server connection others use.
  const bounded = r.done.some((c) => c.id === 'pooler' && c.status === 'pass')
  const opened = await Promise.allSettled(Array.from({ length: n }, () => r.open!(bounded)))
  const claimants = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []))
  // Doctor reports the clock itself; the claims' own warnings would only repeat it.
  const quiet = { warn() {} }
  let verdict: Verdict | undefined
  let wrote = false
  try {
    const refused = opened.find((o) => o.status === 'rejected')
    if (refused !== undefined) throw refused.reason
    const failed = { none: [] as number[], many: [] as number[] }
    for (let round = 1; round <= rounds && !signal?.aborted; round++) {
      if (round > 1) await releaseLease(claimants[0]!.db, jobName, { table })
      // Every claim settles before the round ends, so none can write the job after the cleanup.
      const outcomes = await Promise.allSettled(
        claimants.map((c, i) =>
          // Recorded as any run is (the lease row and the history): the whole path a tick takes.
          withCronLease(c.db, jobName, RACE_LEASE_MS, () => i, {
            table,
            holder: `pg-cron-lease doctor ${i}`,
            logger: quiet,
          }),
        ),
      )
      // A claim cut by a timeout was rolled back: only another outcome can have written the job.
      wrote ||= outcomes.some((o) => o.status === 'fulfilled' || !TIMED_OUT.has(code(o.reason)))
      const error = outcomes.find((o) => o.status === 'rejected')
      if (error !== undefined) throw error.reason
      const winners = outcomes.filter((o) => o.status === 'fulfilled' && o.value.ran).length
      if (winners !== 1) failed[winners === 0 ? 'none' : 'many'].push(round)
    }
    // The lease is held now: every claim below loses, as most claims do.
    const [lost, plain]: [number[], number[]] = [[], []]
    const loser = claimants[claimants.length - 1]!.db
    for (let i = 0; i < LATENCY_SAMPLES && !signal?.aborted; i++) {
      let start = performance.now()
      await withCronLease(loser, jobName, RACE_LEASE_MS, () => null, { table, logger: quiet })
      lost.push(performance.now() - start)
      start = performance.now()
      await loser.query('SELECT 1', [])
      plain.push(performance.now() - start)
    }
    const [none, many] = [failed.none.length, failed.many.length]
    const [lostP50, selectP50] = [median(lost), median(plain)]
    verdict = judgeRace({ single: rounds - none - many, none, many, n, rounds, lostP50, selectP50, failed })
  } catch (error) {
    if (!signal?.aborted) verdict = await raceFailed(error, jobName, r, claimants[0]?.db)
  }
  await Promise.allSettled(claimants.map((c) => c.close()))
  if (wrote) await cleanUp(r, jobName, bounded)
  signal?.throwIfAborted()
  return verdict!
}

// A claim cut by a timeout names the setting, and who holds a lock on the tables, if anyone does.
async function raceFailed(error: unknown, jobName: string, r: RaceInput, db: Queryable | undefined): Promise<Verdict> {
  const setting = TIMED_OUT.get(code(error))
  if (setting === undefined || db === undefined)
    return fail(
      `the race could not run: ${oneLine(error)}`,
      `job ${jobName}`,
      'fix the error above, then run doctor again (docs/operations.md#doctor)',
    )
  const holders = await rows(db, LOCK_HOLDERS_SQL, [quoteTable(r.table), quoteTable(r.history)]).catch(() => [])
  const held = holders.map(
    (h) =>
      `pid ${h.pid} (${h.mode}, ${h.application_name || 'no application_name'}: ${String(h.query).replace(/\s*\n\s*/g, ' ')})`,
  )
  return fail(
    `the race could not run: a claim ran past ${setting} (SQLSTATE ${code(error)})${held.length > 0 ? `, waiting for the lock on ${r.table} held by ${held.join('; ')}` : ''}`,
    `job ${jobName}; each statement of the doctor waits at most ${LOCK_WAIT_MS} ms for a lock and runs at most ${STATEMENT_MS} ms (less when the session says so)`,
    'run doctor again once the lock is released: a plain CREATE INDEX holds SHARE on the table until it ends, CREATE INDEX CONCURRENTLY does not; a statement_timeout that cuts a claim is too short (docs/operations.md#doctor)',
  )
}

// On a connection of its own: the claimants' may be broken. A lock on a table stops its DELETE; a
// job with no row there needs none, else the rows left are named with the statement that deletes them.
async function cleanUp({ table, history, open, historyExists }: RaceInput, jobName: string, bounded: boolean) {
  const names = historyExists ? [table, history] : [table]
  const c = await open!(bounded)
  try {
    for (const t of names) {
      await rows(c.db, DELETE_JOB_SQL(t), [jobName]).catch(async (error) => {
        const left = await one(c.db, COUNT_JOB_SQL(t), [jobName]).catch(() => ({ n: 1 }))
        if (Number(left.n) === 0) return
        const deletes = names.map((x) => `DELETE FROM ${quoteTable(x)} WHERE job_name = '${jobName}';`).join(' ')
        const message = `pg-cron-lease: the rows of the doctor's job ${jobName} could not be deleted (${oneLine(error)}); delete them with: ${deletes}`
        throw Object.assign(new Error(message), { cause: error })
      })
    }
  } finally {
    await c.close()
  }
}

const code = (error: unknown) => String((error as { code?: unknown } | null)?.code)

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

/** `failed`: the rounds, numbered from 1, that had no winner or more than one. */
type Tally = Record<'single' | 'none' | 'many' | 'n' | 'rounds' | 'lostP50' | 'selectP50', number> & {
  failed?: { none: number[]; many: number[] }
}

export function judgeRace(r: Tally): Verdict {
  const ms = (v: number) => `${v.toFixed(2)} ms`
  const cost = `a losing claim's p50 ${ms(r.lostP50)}, ${(r.lostP50 / r.selectP50).toFixed(1)}× SELECT 1's ${ms(r.selectP50)}`
  const which = (label: string, list: number[] = []) =>
    list.length === 0 ? [] : [`${label} ${list.length === 1 ? 'round' : 'rounds'} ${list.join(', ')}`]
  const rounds = [which('more than one winner in', r.failed?.many), which('no winner in', r.failed?.none)]
    .flat()
    .join('; ')
  const detail = `${r.n} connections, ${r.rounds} rounds: ${r.single} with one winner, ${r.none} with none, ${r.many} with more${rounds === '' ? '' : ` (${rounds})`}; ${cost}; its rows were deleted`
  if (r.single === r.rounds && r.none + r.many === 0)
    return pass(`${r.rounds} rounds of ${r.n} connections, exactly one winner each; ${cost}`, detail)
  return fail(
    `${r.rounds - r.single} of ${r.rounds} rounds did not have exactly one winner (${r.many} with more, ${r.none} with none${rounds === '' ? '' : `: ${rounds}`}): the guarantee does not hold on this stack`,
    detail,
    'report it with this output, and do not rely on the lease here (docs/operations.md#doctor)',
  )
}
