/**
 * Running `pg-cron-lease doctor` in-process against a real database, and a lease table as
 * `migrate` leaves it, for the doctor's tests (test/integration/doctor/).
 */
import { main } from '../../src/cli/main.ts'
import { createTableSql, historyTableOf, quoteTable } from '../../src/index.ts'
import type { Queryable } from '../../src/types.ts'

export interface DoctorRun {
  code: number
  stdout: string
  stderr: string
  ms: number
}

/** `main(['doctor', ...args])` with the real `pg` connection, stdout and stderr captured. */
export async function doctorCli(args: string[]): Promise<DoctorRun> {
  const run = { code: -1, stdout: '', stderr: '', ms: 0 }
  const started = performance.now()
  run.code = await main(['doctor', ...args], {
    stdout: { write: (text: string) => (run.stdout += text) },
    stderr: { write: (text: string) => (run.stderr += text) },
    env: {},
  })
  run.ms = performance.now() - started
  return run
}

/** Each check's line of the text output: its mark, id and the rest, by id. */
export function lines(stdout: string): Map<string, { mark: string; text: string }> {
  const found = new Map<string, { mark: string; text: string }>()
  for (const line of stdout.trimEnd().split('\n').slice(0, -1)) {
    const match = /^([✓!✗]) ([a-z]+): (.+)$/.exec(line)
    if (match === null) throw new Error(`not a check line: ${JSON.stringify(line)}`)
    found.set(match[2]!, { mark: match[1]!, text: match[3]! })
  }
  return found
}

/** A lease table and its history table, as `migrate` creates them. */
export async function leaseTableWithHistory(db: Queryable, table: string): Promise<string> {
  await db.query(createTableSql(table), [])
  return table
}

/** The rows of the doctor's own jobs left in `table` or in its history table (when it has one). */
export async function doctorRows(db: Queryable, table: string, which: 'both' | 'history' = 'both'): Promise<number> {
  let n = 0
  for (const t of which === 'both' ? [table, historyTableOf(table)] : [historyTableOf(table)]) {
    const found = await db.query('SELECT to_regclass($1::text) IS NOT NULL AS found', [quoteTable(t)])
    if ((found.rows?.[0] as { found?: boolean } | undefined)?.found !== true) continue
    const sql = `SELECT count(*)::int AS n FROM ${quoteTable(t)} WHERE job_name LIKE 'pg-cron-lease:doctor:%'`
    n += Number(((await db.query(sql, [])).rows?.[0] as { n?: number } | undefined)?.n)
  }
  return n
}
