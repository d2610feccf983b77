/** postgres.js as a {@link Queryable}; only its shape is described: `postgres` is never imported. */
import type { Queryable, QueryResultLike } from '../types.js'
import { fail } from '../validate.js'

/** The one part of a postgres.js `sql` (or a `sql.begin()` callback's) the adapter calls. */
export interface PostgresJsSql {
  unsafe(query: string, parameters?: any[]): PromiseLike<ArrayLike<unknown> & { count?: number | null }>
}

type Unsafe = ReturnType<PostgresJsSql['unsafe']>

/**
 * Wraps a postgres.js `sql` instance as a {@link Queryable}. Statements are prepared exactly when the
 * instance's own `prepare` option is on; the token goes as text, so it stays microsecond-exact.
 * @example
 * await withCronLease(fromPostgresJs(postgres(process.env.DATABASE_URL)), 'digest:hourly', LEASE.HOURLY, sendDigest)
 */
export function fromPostgresJs(sql: PostgresJsSql): Queryable {
  if (typeof (sql as PostgresJsSql | null)?.unsafe !== 'function')
    fail('sql', 'a postgres.js sql instance (a function with an unsafe(query, params) method)', sql)
  // The public type leaves out `unsafe`'s options, so a two-argument stand-in still fits.
  const unsafe = sql.unsafe.bind(sql) as (text: string, params: unknown[], options: { prepare: boolean }) => Unsafe
  return {
    async query(text: string, params: unknown[]): Promise<QueryResultLike> {
      // Only lifts unsafe's own default (off): the instance's setting decides.
      const result = await unsafe(text, params, { prepare: true })
      // Nothing more than the driver said: the core refuses a shape it does not know.
      return {
        rows: Array.isArray(result) ? result : undefined,
        rowCount: typeof result?.count === 'number' ? result.count : undefined,
      }
    },
  }
}
