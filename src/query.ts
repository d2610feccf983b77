/** Each table's statements with their prepared names, and sending them: in a caller's transaction, under a savepoint. */
import { createHash } from 'node:crypto'
import { handleState, type Sending, tableEntry } from './handle.js'
import {
  type ClaimKind,
  CONNECTION_SQL,
  catchUpSql,
  claimSql,
  probeSql,
  recordOutcomeSql,
  recordRunSql,
  renewSql,
  SAVEPOINT_SQL,
  TABLE_FACTS_SQL,
} from './sql.js'
import type { Queryable, QueryResultLike } from './types.js'

/** A statement's text and its prepared name, one per text, so a connection never runs another text under it. */
export type Statement = { readonly text: string; readonly name: string }

/** A table's hot statements for one kind of claimant: all but `claim` and `renew` are the current shape's. */
export type Statements = { readonly [K in 'probe' | 'claim' | 'catchUp' | 'renew' | 'record' | 'recordRun']: Statement }

export const TABLE_FACTS: Statement = statement(TABLE_FACTS_SQL)

// By table, then kind: a key made of both cost more than the lookup.
type OfTable = Partial<Record<ClaimKind, Statements>>
const built = new Map<string, OfTable>()
const newTable = (): OfTable => ({})

export function statementsOf(table: string, kind: ClaimKind): Statements {
  const ofTable = tableEntry(built, table, newTable)
  ofTable[kind] ??= Object.freeze({
    probe: statement(probeSql(table)),
    claim: statement(claimSql(table, kind)),
    catchUp: statement(catchUpSql(table, kind === 'original' ? 'lease' : kind)),
    renew: statement(renewSql(table, kind === 'original' ? 'original' : 'current')),
    record: statement(recordOutcomeSql(table)),
    recordRun: statement(recordRunSql(table)),
  })
  return ofTable[kind]
}

function statement(text: string): Statement {
  return Object.freeze({ text, name: `pg_cron_lease_${createHash('sha256').update(text).digest('hex').slice(0, 24)}` })
}

// Refusals by a pooler blind to prepared statements (PgBouncer < 1.21), or of a stale plan: resent plain, never twice.
const NOT_PREPARED = new Set(['26000', '42P05', '0A000'])

export async function runStatement(
  db: Queryable,
  statement: Statement | string,
  params: unknown[],
  prepare: boolean,
): Promise<QueryResultLike> {
  const state = handleState(db)
  const sending = sendingOf(db, state)
  // 'I' idle, 'T' in a transaction, 'E' failed; a Pool, or a handle that cannot tell, counts as idle.
  const status = sending.status === null ? 'I' : sending.status()
  const text = typeof statement === 'string' ? statement : statement.text
  const named = prepare && sending.named && !state.unprepared && typeof statement !== 'string' ? statement : null
  if (status === 'I') return outside(db, text, params, named)
  if (status === 'T') return underSavepoint(db, text, params)
  // Not known yet: the savepoint tells, as Postgres refuses one outside a transaction (25P01).
  if (status === '?') return underSavepoint(db, text, params, () => outside(db, text, params, named))
  // A failed transaction refuses this as it does any statement; null: a client not connected yet.
  return db.query(text, params)
}

export function transactionStatus(db: Queryable): unknown {
  return sendingOf(db).status?.() ?? null
}

// Decided once per handle; only `pg` handles take `query({ name, text, values })`.
function sendingOf(db: Queryable, state = handleState(db)): Sending {
  if (state.sending !== undefined) return state.sending
  const d = db as Queryable & Record<string, unknown>
  const client = typeof d.connectionParameters === 'object' && d.connectionParameters !== null
  const pool = typeof d.Client === 'function' && typeof d.options === 'object' && 'totalCount' in d
  const reports = d.getTransactionStatus
  const status = typeof reports === 'function' ? () => reports.call(db) : client ? watchStatus(d.connection) : null
  state.sending = { named: client || pool, client, status }
  return state.sending
}

// A pg client before 8.21 keeps no transaction state, but each ReadyForQuery carries it; pg-native's stays unknown.
function watchStatus(connection: unknown): () => unknown {
  type Emitter = { on?: (event: string, listener: (message: { status?: unknown } | undefined) => void) => unknown }
  const emitter = connection as Emitter | null | undefined
  if (typeof emitter?.on !== 'function') return () => '?'
  let status: unknown = '?'
  emitter.on('readyForQuery', (message) => {
    status = message?.status ?? '?'
  })
  return () => status
}

type Named = { query(config: { name: string; text: string; values: unknown[] }): Promise<QueryResultLike> }

// Prepared under `named`'s name, until the pooler in front of the handle refuses once: it will not start keeping them.
async function outside(db: Queryable, text: string, params: unknown[], named: Statement | null) {
  if (named === null) return db.query(text, params)
  try {
    return await (db as unknown as Named).query({ name: named.name, text, values: params })
  } catch (error) {
    if (!NOT_PREPARED.has(codeOf(error) as string)) throw error
    handleState(db).unprepared = true
    return db.query(text, params)
  }
}

/** Under a savepoint, so its failure cannot abort the caller's transaction; `noTransaction` runs if none is open. */
export async function underSavepoint(
  db: Queryable,
  text: string,
  params: unknown[],
  noTransaction?: () => Promise<QueryResultLike>,
): Promise<QueryResultLike> {
  // Each step waits for the one before it: `pg` 8.23 warns when its query queue is used, and `pg` 9 removes it.
  return inTurn(await connectionOf(db), async () => {
    try {
      await db.query(SAVEPOINT_SQL.open, [])
    } catch (error) {
      if (noTransaction !== undefined && codeOf(error) === '25P01') return noTransaction()
      throw error
    }
    let result: QueryResultLike
    try {
      result = await db.query(text, params)
    } catch (error) {
      try {
        await db.query(SAVEPOINT_SQL.rollback, [])
        await db.query(SAVEPOINT_SQL.release, [])
      } catch {
        // The statement's own error is the one to report; a connection that failed fails the next too.
      }
      throw error
    }
    await db.query(SAVEPOINT_SQL.release, [])
    return result
  })
}

// Per connection, the tail of its queue of savepointed statements; none once it has drained.
const queues = new Map<unknown, Promise<void>>()

const ignore = () => {}

function inTurn<T>(connection: unknown, send: () => Promise<T>): Promise<T> {
  const turn = Promise.all([queues.get(connection), asking]).then(send)
  const tail = turn.then(ignore, ignore)
  queues.set(connection, tail)
  void tail.then(() => {
    if (queues.get(connection) === tail) queues.delete(connection)
  })
  return turn
}

// A pg client is its connection; another handle is asked once, so two adapters over one transaction queue as one.
function connectionOf(db: Queryable): Promise<unknown> {
  const state = handleState(db)
  if (sendingOf(db, state).client) return Promise.resolve(db)
  if (state.connection === undefined) {
    const asked = Promise.all([asking, ...queues.values()]).then(async () => {
      const result = await db.query(CONNECTION_SQL, [])
      const id = (result as { rows?: Array<{ connection?: unknown }> } | null)?.rows?.[0]?.connection
      // A driver that returns no rows can only be queued by its object.
      return typeof id === 'string' ? id : db
    })
    state.connection = asked
    asking = asked.then(ignore, ignore)
    asked.catch(() => {
      if (state.connection === asked) state.connection = undefined
    })
  }
  return state.connection
}

// The last connection question asked, settled or not: statements on known connections wait for it.
let asking: Promise<unknown> = Promise.resolve()

export function codeOf(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code
}
