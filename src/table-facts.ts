/**
 * Knowing the table: what a process knows of a lease table's shape comes from one read-only
 * catalog statement per handle and table ({@link tableFactsSql}), never from claims. It is sent at
 * first use, and read again at most once a minute while the table is not of the current shape, so
 * a table upgraded by `pg-cron-lease migrate` is used as such within a minute, with no restart. It
 * takes no lock and cannot fail on a missing table, so it is safe inside a caller's transaction.
 */
import { clockOffset, monotonicMs } from './clock.js'
import { runStatement } from './query.js'
import { type Shape, tableFactsParams } from './sql.js'
import { knowledgeOf, TABLE_FACTS, type TableKnowledge } from './state.js'
import { firstRow } from './ticket.js'
import type { Queryable } from './types.js'

/**
 * How long a shape other than the current one is taken as known before it is read again: a minute.
 * A field, not a constant, so a test of an upgrade need not wait a minute for it.
 */
export const SHAPE_READ = { everyMs: 60_000 }

/** Who asks, and how: the part of a claim's config the read needs. */
interface Asking {
  readonly db: Queryable
  readonly table: string
}

/**
 * The table's shape as `db` sees it: at once when known (the hot path awaits nothing), else read.
 * Undefined: there is no such table (or this role cannot see it), which the claim's own error then
 * says; nothing is kept, so the next call reads again.
 */
export function shapeOf(asking: Asking): Shape | undefined | Promise<Shape | undefined> {
  const known = knowledgeOf(asking.db, asking.table)
  if (known.shape === 'current') return known.shape
  if (known.shape === 'original' && monotonicMs() - known.readAt < SHAPE_READ.everyMs) return known.shape
  return readFacts(asking, known)
}

/**
 * Reads the table's facts: its shape, and the database clock, from which this process's offset is
 * estimated (what a replica whose claims keep losing judges its occurrences by). Claims racing
 * the first use share one read.
 */
export function readFacts(asking: Asking, known = knowledgeOf(asking.db, asking.table)): Promise<Shape | undefined> {
  const { db, table } = asking
  if (known.reading !== undefined) return known.reading
  const sentWallMs = Date.now()
  // Plain text: a statement sent once per handle gains nothing from a prepared plan.
  const reading = runStatement(db, TABLE_FACTS, tableFactsParams(table), false).then(
    (result) => {
      known.reading = undefined
      const row = firstRow(result)
      const shape: Shape | undefined = row?.exists !== true ? undefined : row.current === true ? 'current' : 'original'
      learn(known, shape, row?.checked_at, sentWallMs)
      return shape
    },
    (error: unknown) => {
      known.reading = undefined
      throw error
    },
  )
  known.reading = reading
  return reading
}

function learn(known: TableKnowledge, shape: Shape | undefined, checkedAt: unknown, sentWallMs: number): void {
  const now = monotonicMs()
  known.shape = shape
  known.readAt = now
  const offsetMs = typeof checkedAt === 'string' ? clockOffset(checkedAt, sentWallMs, Date.now()) : null
  if (offsetMs !== null) known.clock = { offsetMs, at: now }
}

/** Forgets the shape, so the next claim reads it again: a statement was refused for a column or function it named. */
export function forgetShape(db: Queryable, table: string): void {
  knowledgeOf(db, table).shape = undefined
}
