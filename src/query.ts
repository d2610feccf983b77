/** Sending a statement: with `pg` the hot statements go as named prepared statements. */
import { releaseSavepointSql, rollbackToSavepointSql, savepointSql } from './sql.js'
import { handleState, type Statement } from './state.js'
import type { Queryable, QueryResultLike } from './types.js'

// Refusals by a pooler that does not track prepared statements (PgBouncer < 1.21), or of a stale
// cached plan: all raised before the statement runs, so resending it plain cannot run it twice.
const NOT_PREPARED = new Set(['26000', '42P05', '0A000'])

// Only `pg` handles take `query({ name, text, values })`.
export function isPg(db: object): boolean {
  const d = db as { connectionParameters?: unknown; Client?: unknown; options?: unknown }
  const client = typeof d.connectionParameters === 'object' && d.connectionParameters !== null
  const pool = typeof d.Client === 'function' && typeof d.options === 'object' && 'totalCount' in d
  return client || pool
}

/** Runs one statement: prepared where possible, under a savepoint in a caller's transaction. */
export function runStatement(
  db: Queryable,
  statement: Statement | string,
  params: unknown[],
  prepare: boolean,
): Promise<QueryResultLike> {
  // Not async, as it runs on every claim; a driver that throws still gives a rejection.
  try {
    const text = typeof statement === 'string' ? statement : statement.text
    const client = db as { getTransactionStatus?: () => unknown }
    // 'I' idle, 'T' in a transaction, 'E' failed; a Pool (or an old `pg`) counts as idle.
    const status = typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : 'I'
    if (status === 'T') return underSavepoint(db, text, params)
    if (status !== 'I' || !prepare || typeof statement === 'string' || handleState(db).unprepared || !isPg(db)) {
      return Promise.resolve(db.query(text, params))
    }
    const named = db as unknown as {
      query(config: { name: string; text: string; values: unknown[] }): Promise<QueryResultLike>
    }
    return named.query({ name: statement.name, text, values: params }).then(undefined, (error: unknown) => {
      if (!NOT_PREPARED.has((error as { code?: unknown } | null)?.code as string)) throw error
      // The pooler in front of this handle will not start keeping prepared statements.
      handleState(db).unprepared = true
      return db.query(text, params)
    })
  } catch (error) {
    return Promise.reject(error)
  }
}

// A savepoint per statement: two calls in flight on one client must not touch each other's.
let savepoints = 0

// Under a savepoint a failure cannot abort the caller's transaction. Plain text, never prepared;
// the savepoint and statement are queued in one step, so no caller query runs between them.
export function underSavepoint(db: Queryable, text: string, params: unknown[]): Promise<QueryResultLike> {
  // One at a time per client: a RELEASE also releases later savepoints, failing their own RELEASE.
  const turn = (inFlight.get(db) ?? Promise.resolve()).then(() => savepointed(db, text, params))
  inFlight.set(db, turn.then(ignore, ignore))
  return turn
}

const inFlight = new WeakMap<object, Promise<void>>()

const ignore = () => {}

function savepointed(db: Queryable, text: string, params: unknown[]): Promise<QueryResultLike> {
  savepoints = (savepoints % 1_000_000_000) + 1
  const name = `pg_cron_lease_${savepoints}`
  const opened = Promise.resolve(db.query(savepointSql(name), []))
  // Read on the failure path only; never an unhandled rejection.
  opened.catch(ignore)
  return Promise.resolve(db.query(text, params)).then(
    // A savepoint refused (no transaction open, 25P01) fails the call, and nothing is released.
    (result) => opened.then(() => db.query(releaseSavepointSql(name), [])).then(() => result),
    (error: unknown) => {
      const fail = () => Promise.reject(error)
      const undo = () => {
        Promise.resolve(db.query(rollbackToSavepointSql(name), [])).catch(ignore)
        return db.query(releaseSavepointSql(name), [])
      }
      return opened.then(undo).then(fail, fail)
    },
  )
}
