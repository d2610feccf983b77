/**
 * A stand-in for a pool, for argument validation and SQL shape only: it records every query and
 * answers with whatever the test gives it. Nothing about concurrency is ever tested with it.
 */
export const TOKEN = '2026-11-29T22:12:11.428993Z'
export const WIN = { rowCount: 1, rows: [{ claimed_at: TOKEN }] }
export const LOSS = { rowCount: 0, rows: [] }

/** Whether a call is the statement that records a won tick's outcome, sent after it settles. */
export const isRecord = (call: Call): boolean => /^UPDATE \S+ AS lease\nSET every_ms/.test(call.text)

export interface Call {
  text: string
  params: unknown[]
}

/** Whether a call is the catalog read of the table's facts (its shape and the database clock). */
export const isFacts = (call: Call): boolean =>
  call.text.startsWith('SELECT to_regclass($1::text) IS NOT NULL AS exists')

/**
 * A stand-in pool. The read of the table's facts is answered here, as a table of `shape` would
 * answer it (default: the current shape), and kept apart in `facts`, so `calls` holds what the
 * library sends once it knows the table.
 */
export function standIn(
  answer: (call: Call) => unknown = () => WIN,
  shape: 'current' | 'original' | 'missing' = 'current',
) {
  const calls: Call[] = []
  const facts: Call[] = []
  return {
    calls,
    facts,
    query(text: string, params: unknown[]): Promise<any> {
      const call = { text, params }
      if (isFacts(call)) {
        facts.push(call)
        const columns = { current: 18, original: 4, missing: 0 }[shape]
        const row = {
          exists: shape !== 'missing',
          columns,
          current: shape === 'current',
          checked_at: new Date().toISOString(),
        }
        return Promise.resolve({ rowCount: 1, rows: [row] })
      }
      calls.push(call)
      return Promise.resolve().then(() => answer(call))
    },
  }
}
