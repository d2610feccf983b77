/**
 * A stand-in for a pool, for argument validation and SQL shape only: it records every query and
 * answers with whatever the test gives it. Nothing about concurrency is ever tested with it.
 */
export const TOKEN = '2026-11-29T22:12:11.428993Z'
export const WIN = { rowCount: 1, rows: [{ claimed_at: TOKEN }] }
export const LOSS = { rowCount: 0, rows: [] }

/** Whether a call is the statement that records a won tick's outcome, sent after it settles. */
export const isRecord = (call: Call): boolean =>
  /^(?:WITH "db clock"[\s\S]*)?UPDATE \S+ AS lease\n *SET last_finished_at/.test(call.text)

export interface Call {
  text: string
  params: unknown[]
}

/** Whether a call is the catalog read of the table's facts (its shape and the database clock). */
export const isFacts = (call: Call): boolean =>
  call.text.startsWith('SELECT to_regclass($1::text) IS NOT NULL AS exists')

/** Whether a call is the read-only probe a claim on the current shape sends before the claim. */
export const isProbe = (call: Call): boolean => call.text.startsWith('SELECT true AS held FROM ')

/**
 * A stand-in pool. The read of the table's facts is answered here, as a table of `shape` would
 * answer it (default: the current shape), and kept apart in `facts`; so is the claim's probe,
 * answered "not held" (or "held", a row back, where `held` says so) and kept in `probes`. `calls`
 * holds the rest the library sends.
 */
export function standIn(
  answer: (call: Call) => unknown = () => WIN,
  shape: 'current' | 'original' | 'missing' = 'current',
  held: (probe: Call) => boolean = () => false,
) {
  const calls: Call[] = []
  const facts: Call[] = []
  const probes: Call[] = []
  return {
    calls,
    facts,
    probes,
    query(text: string, params: unknown[]): Promise<any> {
      const call = { text, params }
      if (isFacts(call)) {
        facts.push(call)
        const columns = { current: 18, original: 4, missing: 0 }[shape]
        const row = {
          exists: shape !== 'missing',
          columns,
          current: shape === 'current',
          history: shape === 'current',
          checked_at: new Date().toISOString(),
        }
        return Promise.resolve({ rowCount: 1, rows: [row] })
      }
      if (isProbe(call)) {
        probes.push(call)
        return Promise.resolve(held(call) ? { rowCount: 1, rows: [{ held: true }] } : { rowCount: 0, rows: [] })
      }
      calls.push(call)
      return Promise.resolve().then(() => answer(call))
    },
  }
}
