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
 * Each statement goes through `sql.unsafe(text, params, { prepare: true })`, which makes it a
 * prepared statement exactly when the `sql` instance's own `prepare` option is on (postgres.js's
 * default; `postgres(url, { prepare: false })`, the setting its docs give for PgBouncer in
 * transaction mode, turns it off). Without that third argument `unsafe` never prepares, whatever
 * the instance says, and sends every parameterised statement as a Parse and Describe, then a Bind
 * and Execute: two round trips. The claim token stays microsecond-exact: the core sends it as a
 * text-typed parameter, which postgres.js passes through untouched (a timestamptz-typed parameter
 * would be rounded through a JS `Date`).
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
  // postgres.js's `unsafe` takes options as a third argument; the public type leaves it out so
  // that a two-argument stand-in still fits, and an `unsafe` that ignores it loses nothing.
  const unsafe = sql.unsafe.bind(sql) as (
    query: string,
    parameters: unknown[],
    options: { prepare: boolean },
  ) => ReturnType<PostgresJsSql['unsafe']>
  return {
    async query(text: string, params: unknown[]): Promise<QueryResultLike> {
      // `prepare: true` here only lifts unsafe's own default (off): postgres.js prepares when its
      // instance option allows it too, so the user's setting decides.
      const result = await unsafe(text, params, { prepare: true })
      // Pass on what the driver said and nothing more: when the result is not the expected shape,
      // the core's reader refuses it rather than guess a win.
      return {
        rows: Array.isArray(result) ? result : undefined,
        rowCount: typeof result?.count === 'number' ? result.count : undefined,
      }
    },
  }
}
