/**
 * Adapters the README gives as recipes rather than exports, kept here as the code the tests run.
 */
import type { Knex } from 'knex'
import type { Queryable } from '../../src/index.ts'

/**
 * The Knex recipe from the README: knex.raw takes `?` placeholders, so each `$n` becomes a `?` with
 * its value (the claim uses `$1` twice). A literal `?` is escaped, and quoted identifiers are left
 * as they are. knex.raw on pg resolves to pg's own result, with `rows` and `rowCount`.
 */
export function fromKnex(knex: Knex | Knex.Transaction): Queryable {
  return {
    query(text, params) {
      const bindings: unknown[] = []
      const sql = text.replace(/"[^"]*"|\?|\$(\d+)/g, (match, n?: string) => {
        if (match === '?') return '\\?'
        if (n === undefined) return match
        bindings.push(params[Number(n) - 1])
        return '?'
      })
      return knex.raw(sql, bindings as Knex.RawBinding[])
    },
  }
}
