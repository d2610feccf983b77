/**
 * Sending a statement. With `pg` the hot statements (claim, renew, keep-alive beat) go as named
 * prepared statements, so the server parses and plans each once per connection instead of on
 * every tick; everything else, and every other driver, sends plain parameterised text.
 */
import { releaseSavepointSql, rollbackToSavepointSql, savepointSql } from './sql.js'
import { handleState, type Statement } from './state.js'
import type { Queryable, QueryResultLike } from './types.js'

// A pooler that does not track protocol-level prepared statements (PgBouncer before 1.21 in
// transaction mode, and similar) hands the statement to a server connection that never saw it
// (26000), or that already has it from another client (42P05); after DDL or a failover the
// server may refuse a cached plan (0A000). Each of these is raised before the statement runs,
// so sending the same text unprepared at once cannot run it twice.
const NOT_PREPARED = new Set(['26000', '42P05', '0A000'])

/**
 * Whether `db` is a `pg` Pool, Client or PoolClient, which take `query({ name, text, values })`.
 * Anything else (PGlite, adapters, wrappers) may not, so it only ever gets `query(text, params)`.
 */
function isPg(db: object): boolean {
  const d = db as { connectionParameters?: unknown; Client?: unknown; options?: unknown }
  const client = typeof d.connectionParameters === 'object' && d.connectionParameters !== null
  const pool = typeof d.Client === 'function' && typeof d.options === 'object' && 'totalCount' in d
  return client || pool
}

/**
 * A `pg` Client or PoolClient's transaction state: `'I'` idle, `'T'` in a transaction block, `'E'`
 * in a failed one. A Pool has none (it queries on an idle client), and neither has a `pg` too old
 * to report it: both are taken as idle.
 */
function transactionStatus(db: object): unknown {
  const client = db as { getTransactionStatus?: () => unknown }
  return typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : 'I'
}

/**
 * Runs one statement: prepared when `prepare` is on and `db` is `pg` outside a transaction, plain
 * text otherwise, and plain text again at once when a pooler refuses the prepared form. Inside a
 * caller's transaction on a `pg` client it runs under a savepoint (see {@link underSavepoint}).
 */
export function runStatement(
  db: Queryable,
  statement: Statement | string,
  params: unknown[],
  prepare: boolean,
): Promise<QueryResultLike> {
  // Not async, as it runs on every claim (see runLease); a driver that throws instead of
  // rejecting still gives a rejection.
  try {
    const text = typeof statement === 'string' ? statement : statement.text
    const status = transactionStatus(db)
    if (status === 'T') return underSavepoint(db, text, params)
    // In a failed transaction every statement is refused; there is nothing left to protect.
    if (status !== 'I') return Promise.resolve(db.query(text, params))
    if (!prepare || typeof statement === 'string' || handleState(db).unprepared || !isPg(db)) {
      return Promise.resolve(db.query(text, params))
    }
    const named = db as unknown as {
      query(config: { name: string; text: string; values: unknown[] }): Promise<QueryResultLike>
    }
    return named.query({ name: statement.name, text, values: params }).then(undefined, (error: unknown) => {
      if (!NOT_PREPARED.has((error as { code?: unknown } | null)?.code as string)) throw error
      // Such a handle stays unprepared for the life of the process: the pooler in front of it will
      // not start keeping prepared statements.
      handleState(db).unprepared = true
      return db.query(text, params)
    })
  } catch (error) {
    return Promise.reject(error)
  }
}

// Each statement gets a savepoint of its own: two library calls in flight on one client (a beat
// beside the tick's own listLeases) must never roll back to, or release, each other's.
let savepoints = 0

/**
 * Runs a statement inside the caller's transaction so that its failure cannot abort that
 * transaction: any statement can fail (a lock or statement timeout, a missing table, a trigger),
 * and a failed statement in a transaction block leaves the whole block refusing everything until
 * a rollback, so the caller's own writes would be lost with it. Under a savepoint, a failure is
 * rolled back to the savepoint and the caller's transaction goes on; the error still rejects.
 *
 * Plain text, never prepared: a pooler's refusal of a named statement would itself be a failure.
 * The savepoint and the statement are queued on the client in one step, so none of the caller's
 * own queries on the same client can run between them; one that runs before the release is kept
 * by it. (Two queued at once is also what pg queues without its deprecation warning.) On failure
 * the rollback is queued when the failure is read, so a query the caller sent on the same client
 * while the statement ran (a tick querying during a keep-alive beat) can meet the aborted state and
 * fail with 25P02: loudly, and the transaction is whole again after the rollback. A savepoint that
 * could not be made (the transaction had failed before) is not rolled back to.
 */
function underSavepoint(db: Queryable, text: string, params: unknown[]): Promise<QueryResultLike> {
  // One library statement at a time per client: a RELEASE of one savepoint also releases every
  // savepoint made after it, so a second call's savepoint opened in between would be gone when its
  // own RELEASE came, and that RELEASE would fail and abort the caller's transaction.
  const turn = (inFlight.get(db) ?? Promise.resolve()).then(() => savepointed(db, text, params))
  inFlight.set(
    db,
    turn.then(
      () => {},
      () => {},
    ),
  )
  return turn
}

const inFlight = new WeakMap<object, Promise<void>>()

function savepointed(db: Queryable, text: string, params: unknown[]): Promise<QueryResultLike> {
  savepoints = (savepoints % 1_000_000_000) + 1
  const name = `pg_cron_lease_${savepoints}`
  const opened = Promise.resolve(db.query(savepointSql(name), []))
  // Its outcome is read on the failure path only; it must not be reported as unhandled.
  opened.catch(() => {})
  return Promise.resolve(db.query(text, params)).then(
    (result) => Promise.resolve(db.query(releaseSavepointSql(name), [])).then(() => result),
    (error: unknown) => {
      const undo = () => {
        const rolledBack = Promise.resolve(db.query(rollbackToSavepointSql(name), []))
        const released = Promise.resolve(db.query(releaseSavepointSql(name), []))
        rolledBack.catch(() => {})
        return released
      }
      // The statement's own error is the one to report, whatever the undoing met.
      const fail = () => Promise.reject(error)
      return opened.then(undo, fail).then(fail, fail)
    },
  )
}
