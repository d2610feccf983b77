/**
 * postgres.js (`postgres`) as a {@link Queryable}. Its `sql.unsafe(text, params)` resolves to an
 * Array of rows carrying a `.count`, with neither `rows` nor `rowCount`, so the core could not read
 * it as it is. Only the shape is described here: the library never imports `postgres`.
 */
import type { Queryable, QueryResultLike } from '../types.js'
import { fail } from '../validate.js'

/**
 * The one part of a postgres.js `sql` instance (or of the `sql` a `sql.begin()` or `sql.reserve()`
 * callback receives) that the adapter calls. A real postgres.js `Sql` satisfies it; nothing else
 * from postgres.js is required.
 *
 * @example
 * const inMemory: PostgresJsSql = { unsafe: async () => Object.assign([], { count: 0 }) }
 * const db = fromPostgresJs(inMemory) // every claim loses: no row came back
 */
export interface PostgresJsSql {
  unsafe(query: string, parameters?: any[]): PromiseLike<ArrayLike<unknown> & { count?: number | null }>
}

/**
 * Wraps a postgres.js `sql` instance so `withCronLease` (and everything built on it) can use it.
 *
 * Each statement goes through `sql.unsafe(text, params)`, which postgres.js sends unprepared by
 * default, so it also works behind PgBouncer in transaction mode. The claim token stays
 * microsecond-exact: the core sends it as a text-typed parameter, which postgres.js passes through
 * untouched (a timestamptz-typed parameter would be rounded through a JS `Date`).
 *
 * @example
 * import postgres from 'postgres'
 * import { fromPostgresJs, LEASE, withCronLease } from 'pg-cron-lease'
 *
 * const sql = postgres(process.env.DATABASE_URL)
 * const db = fromPostgresJs(sql)
 * await withCronLease(db, 'digest:hourly', LEASE.HOURLY, sendDigest)
 */
export function fromPostgresJs(sql: PostgresJsSql): Queryable {
  if (typeof (sql as PostgresJsSql | null)?.unsafe !== 'function') {
    fail('sql', 'a postgres.js sql instance (a function with an unsafe(query, params) method)', sql)
  }
  return {
    async query(text: string, params: unknown[]): Promise<QueryResultLike> {
      const result = await sql.unsafe(text, params)
      // Pass on what the driver said and nothing more: when the result is not the expected shape,
      // the core's reader refuses it rather than guess a win.
      return {
        rows: Array.isArray(result) ? result : undefined,
        rowCount: typeof result?.count === 'number' ? result.count : undefined,
      }
    },
  }
}
