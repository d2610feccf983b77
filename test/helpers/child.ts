/**
 * Waiting for a child process the tests started: its exit code and everything it wrote.
 */
import { type ChildProcess, spawn } from 'node:child_process'

export interface Finished {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
}

/**
 * Resolves once `child` has exited and its output streams have closed. With `killAfterMs`, a child
 * still running by then is killed (SIGKILL), so a process that never exits fails its test on the
 * code instead of hanging the suite.
 */
export function finished(child: ChildProcess, options: { killAfterMs?: number } = {}): Promise<Finished> {
  let stdout = ''
  let stderr = ''
  child.stdout?.on('data', (chunk) => {
    stdout += chunk
  })
  child.stderr?.on('data', (chunk) => {
    stderr += chunk
  })
  const killer =
    options.killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), options.killAfterMs)
  return new Promise((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code, signal) => {
      clearTimeout(killer)
      resolve({ code, signal, stdout, stderr })
    })
  })
}

/**
 * A replica in a process of its own (test/helpers/dying-replica.ts) that has claimed `job` for
 * `occurrence` as holder `dying`, and whose tick has started and never ends: kill it to make a run
 * die mid-tick. `exit` settles when it has gone (killed after 30 s at the latest).
 */
export async function dyingReplica(run: {
  table: string
  job: string
  occurrence: Date
  leaseMs: number
  url?: string
}): Promise<{ child: ChildProcess; exit: Promise<Finished> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', new URL('./dying-replica.ts', import.meta.url).pathname], {
    env: {
      ...process.env,
      ...(run.url === undefined ? {} : { DATABASE_URL: run.url }),
      DYING_TABLE: run.table,
      DYING_JOB: run.job,
      DYING_OCCURRENCE: run.occurrence.toISOString(),
      DYING_LEASE_MS: String(run.leaseMs),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const exit = finished(child, { killAfterMs: 30_000 })
  // The child prints once its tick runs: a kill from now on lands mid-tick.
  await new Promise<void>((resolve) =>
    child.stdout!.on('data', (chunk) => String(chunk).includes('ticking') && resolve()),
  )
  return { child, exit }
}
