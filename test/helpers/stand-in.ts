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

export function standIn(answer: (call: Call) => unknown = () => WIN) {
  const calls: Call[] = []
  return {
    calls,
    query(text: string, params: unknown[]): Promise<any> {
      const call = { text, params }
      calls.push(call)
      return Promise.resolve().then(() => answer(call))
    },
  }
}
