/** The run history behind /api/jobs/:name/runs, until listRuns (src/list-runs.ts) is merged. */
import type { Queryable } from '../types.js'

export async function readRuns(
  _db: Queryable,
  _opts: { table: string; jobName: string; limit?: unknown; before?: string },
): Promise<unknown[]> {
  throw new Error('the run history is not available in this build')
}
