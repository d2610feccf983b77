/**
 * A table's shape comes from one read-only, lockless catalog statement per handle and table, read
 * again at most once a minute until current, so an upgrade is picked up without a restart.
 */
import { clockOffset, monotonicMs } from './clock.js'
import { runStatement } from './query.js'
import { type Shape, tableFactsParams } from './sql.js'
import { knowledgeOf, TABLE_FACTS, type TableKnowledge } from './state.js'
import { firstRow } from './ticket.js'
import type { Queryable } from './types.js'

/** How long a non-current shape is trusted: a field, so an upgrade test need not wait a minute. */
export const SHAPE_READ = { everyMs: 60_000 }

/** Who asks, and how: the part of a claim's config the read needs. */
interface Asking {
  readonly db: Queryable
  readonly table: string
}

/** The table's shape: at once when known (the hot path awaits nothing); undefined: no such table. */
export function shapeOf(asking: Asking): Shape | undefined | Promise<Shape | undefined> {
  const known = knowledgeOf(asking.db, asking.table)
  if (known.shape === 'current') return known.shape
  if (known.shape === 'original' && monotonicMs() - known.readAt < SHAPE_READ.everyMs) return known.shape
  return readFacts(asking, known)
}

/** Reads the shape and the database clock (the offset estimate); racing first claims share one read. */
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
