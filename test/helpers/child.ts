/**
 * Waiting for a child process the tests started: its exit code and everything it wrote.
 */
import type { ChildProcess } from 'node:child_process'

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
