/** A table's shape, from a lockless catalog read per handle, again at most once a minute until current: no restart. */
import { clockOffset } from './clock.js'
import { knowledgeOf, type TableKnowledge } from './handle.js'
import { runStatement, TABLE_FACTS } from './query.js'
import { firstRow } from './result.js'
import { type Shape, tableFactsParams } from './sql.js'
import type { ClaimConfig } from './ticket.js'

// A field, so an upgrade test need not wait a minute.
export const SHAPE_READ = { everyMs: 60_000 }

type Asking = Pick<ClaimConfig, 'db' | 'table'>

// At once when known, so the hot path awaits nothing; undefined: no such table.
export function shapeOf(asking: Asking): Shape | undefined | Promise<Shape | undefined> {
  const known = knowledgeOf(asking.db, asking.table)
  if (known.shape === 'current' && known.history) return known.shape
  if (known.shape !== undefined && performance.now() - known.readAt < SHAPE_READ.everyMs) return known.shape
  return readFacts(asking, known)
}

// The shape and the database clock's offset; racing first claims share one read.
export function readFacts({ db, table }: Asking, known = knowledgeOf(db, table)): Promise<Shape | undefined> {
  known.reading ??= read({ db, table }, known).finally(() => {
    known.reading = undefined
  })
  return known.reading
}

async function read({ db, table }: Asking, known: TableKnowledge): Promise<Shape | undefined> {
  const sentWallMs = Date.now()
  // Plain text: a statement sent once per handle gains nothing from a prepared plan.
  const row = firstRow(await runStatement(db, TABLE_FACTS, tableFactsParams(table), false))
  known.shape = row?.exists !== true ? undefined : row.current === true ? 'current' : 'original'
  known.history = known.shape === 'current' && row?.history === true
  known.readAt = performance.now()
  const offsetMs = typeof row?.checked_at === 'string' ? clockOffset(row.checked_at, sentWallMs, Date.now()) : null
  if (offsetMs !== null) known.clock = { offsetMs, at: known.readAt }
  return known.shape
}
