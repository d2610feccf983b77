/**
 * Sending a statement: with `pg` the hot statements go as named prepared statements; in a caller's
 * transaction each goes under a savepoint, one at a time per connection.
 */

import { type HandleState, handleState, type Sending } from './handle.js'
import { connectionSql, releaseSavepointSql, rollbackToSavepointSql, savepointSql } from './sql.js'
import type { Statement } from './statements.js'
import type { Queryable, QueryResultLike } from './types.js'

// Refusals by a pooler that does not track prepared statements (PgBouncer < 1.21), or of a stale
// cached plan: all raised before the statement runs, so resending it plain cannot run it twice.
const NOT_PREPARED = new Set(['26000', '42P05', '0A000'])

/** Runs one statement: prepared where possible, under a savepoint in a caller's transaction. */
export async function runStatement(
  db: Queryable,
  statement: Statement | string,
  params: unknown[],
  prepare: boolean,
): Promise<QueryResultLike> {
  const state = handleState(db)
  const sending = state.sending ?? sendingOf(db, state)
  // 'I' idle, 'T' in a transaction, 'E' failed; a Pool, or a handle that cannot tell, counts as idle.
  const status = sending.status === null ? 'I' : sending.status()
  const named = prepare && sending.named
  if (status === 'I') return outside(db, state, statement, params, named)
  const text = typeof statement === 'string' ? statement : statement.text
  if (status === 'T') return underSavepoint(db, text, params)
  // Not known yet: the savepoint tells, as Postgres refuses one outside a transaction (25P01).
  if (status === '?') return underSavepoint(db, text, params, () => outside(db, state, statement, params, named))
  // A failed transaction refuses this as it does any statement; null: a client not connected yet.
  return db.query(text, params)
}

/** A handle's transaction state, as pg names it ('?': not known yet); null when it cannot tell. */
export function transactionStatus(db: Queryable): unknown {
  const state = handleState(db)
  return (state.sending ?? sendingOf(db, state)).status?.() ?? null
}

// Decided once per handle; only `pg` handles take `query({ name, text, values })`.
function sendingOf(db: Queryable, state: HandleState): Sending {
  const d = db as {
    connectionParameters?: unknown
    Client?: unknown
    options?: unknown
    connection?: unknown
    getTransactionStatus?: unknown
  }
  const client = typeof d.connectionParameters === 'object' && d.connectionParameters !== null
  const pool = typeof d.Client === 'function' && typeof d.options === 'object' && 'totalCount' in d
  const reports = typeof d.getTransactionStatus === 'function'
  const status = reports
    ? () => (db as unknown as { getTransactionStatus(): unknown }).getTransactionStatus()
    : client
      ? watchStatus(d.connection)
      : null
  state.sending = { named: client || pool, client, status }
  return state.sending
}

// A pg client before 8.21 keeps no transaction state, but its connection emits every ReadyForQuery,
// which carries it: watched from the first statement on, and not known until a reply comes. A
// client with no such connection (pg-native) is never known, so each statement asks by a savepoint.
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

// Outside a transaction: prepared on a pg handle, unless the pooler in front of it refused once.
async function outside(
  db: Queryable,
  state: HandleState,
  statement: Statement | string,
  params: unknown[],
  named: boolean,
): Promise<QueryResultLike> {
  if (!named || typeof statement === 'string' || state.unprepared) {
    return db.query(typeof statement === 'string' ? statement : statement.text, params)
  }
  type Named = { query(config: { name: string; text: string; values: unknown[] }): Promise<QueryResultLike> }
  try {
    return await (db as unknown as Named).query({ name: statement.name, text: statement.text, values: params })
  } catch (error) {
    if (!NOT_PREPARED.has(codeOf(error) as string)) throw error
    // The pooler in front of this handle will not start keeping prepared statements.
    state.unprepared = true
    return db.query(statement.text, params)
  }
}

/**
 * Runs a statement under a savepoint, so its failure cannot abort the caller's transaction: plain
 * text, never prepared. `noTransaction` runs instead when Postgres refuses the savepoint as no
 * transaction is open (25P01); without it, that refusal rejects.
 */
export function underSavepoint(
  db: Queryable,
  text: string,
  params: unknown[],
  noTransaction?: () => Promise<QueryResultLike>,
): Promise<QueryResultLike> {
  const send = () => savepointed(db, text, params, noTransaction)
  return connectionOf(db).then((key) => inTurn(key, send))
}

// One savepoint name is enough: on a connection, nothing else of the library's is in flight while
// one is open (inTurn), so a RELEASE can only ever release its own.
const SAVEPOINT = 'pg_cron_lease'

// Each step is sent once the one before it has settled: `pg` 8.23 warns when its query queue is
// used, and `pg` 9 removes it.
async function savepointed(
  db: Queryable,
  text: string,
  params: unknown[],
  noTransaction: (() => Promise<QueryResultLike>) | undefined,
): Promise<QueryResultLike> {
  try {
    await db.query(savepointSql(SAVEPOINT), [])
  } catch (error) {
    if (noTransaction !== undefined && codeOf(error) === '25P01') return noTransaction()
    throw error
  }
  let result: QueryResultLike
  try {
    result = await db.query(text, params)
  } catch (error) {
    try {
      await db.query(rollbackToSavepointSql(SAVEPOINT), [])
      await db.query(releaseSavepointSql(SAVEPOINT), [])
    } catch {
      // The statement's own error is the one to report; a connection that failed fails the next too.
    }
    throw error
  }
  await db.query(releaseSavepointSql(SAVEPOINT), [])
  return result
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

// A pg client is its connection. Any other handle is asked which connection it is on, once per
// object: two adapters made over one transaction (fromKnex(trx) per call) are two objects on one
// connection, and their savepoints must queue as one. The question is a statement on a connection
// not known yet, so it waits for every statement in flight, and every statement waits for it.
function connectionOf(db: Queryable): Promise<unknown> {
  const state = handleState(db)
  if ((state.sending ?? sendingOf(db, state)).client) return Promise.resolve(db)
  if (state.connection === undefined) {
    const ask = async () => {
      const result = await db.query(connectionSql(), [])
      const id = (result as { rows?: Array<{ connection?: unknown }> } | null)?.rows?.[0]?.connection
      // A driver that returns no rows can only be queued by its object.
      return typeof id === 'string' ? id : db
    }
    // After what is in flight now; what is sent from now on waits for it (inTurn).
    const asked = Promise.all([asking, ...queues.values()]).then(ask)
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

function codeOf(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code
}
