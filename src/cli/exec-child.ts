/** exec's command as a child process: the caller's stdio and environment, signals forwarded, stopped when the lease is lost. */
import { type ChildProcess, spawn } from 'node:child_process'
import { constants } from 'node:os'
import { oneLine } from '../format-value.js'
import { duration } from '../human.js'

/**
 * A run of the command that did not end with exit code 0, as the run history records it
 * (`exec: exit code 3: <last line of stderr>`), with the exit code `exec` ends with.
 *
 * @example
 * throw new CommandFailed('exit code 3: disk full', 3)
 */
export class CommandFailed extends Error {
  override name = 'exec'
  readonly exitCode: number
  constructor(message: string, exitCode: number) {
    super(message)
    this.exitCode = exitCode
  }
}

// The end of stderr kept to find its last line in (the history keeps 500 characters of an error), and how
// long after its exit the command's stderr may stay open (a child of its own holds it) before it is cut.
const TAIL = 2000
const STDERR_AFTER_EXIT_MS = 1000

/**
 * Runs `argv` to its end, its stderr passed to `stderr` as it comes: resolves when it exits 0, else
 * rejects with a {@link CommandFailed} (127: it cannot be started; 128 + n: signal n ended it).
 *
 * @example
 * await runCommand(['pg_dump', 'shop'], { env: process.env, signal: ctx.signal, killAfterMs: 10_000, stderr: write })
 */
export function runCommand(
  argv: string[],
  options: { env: NodeJS.ProcessEnv; signal: AbortSignal; killAfterMs: number; stderr(text: string): void },
): Promise<void> {
  const { env, signal, killAfterMs, stderr } = options
  const [file, ...args] = argv as [string, ...string[]]
  return new Promise((resolve, reject) => {
    // Passed on, and waited for, so no orphan is left; listened for first, so none arrives unheard.
    let child: ChildProcess | undefined
    const forward = (name: NodeJS.Signals) => child?.kill(name)
    process.on('SIGTERM', forward).on('SIGINT', forward)
    let tail = ''
    let lost: string | undefined
    let killer: NodeJS.Timeout | undefined
    // The lease can no longer be kept, so another host may soon run the job: the command must stop.
    const stop = () => {
      lost = oneLine(signal.reason).replace(/^pg-cron-lease: /, '')
      stderr(`pg-cron-lease: ${lost}; stopping the command: SIGTERM, then SIGKILL after ${duration(killAfterMs)}\n`)
      child?.kill('SIGTERM')
      killer = setTimeout(() => child?.kill('SIGKILL'), killAfterMs)
    }
    let settled = false
    const settle = (code: number | null, by: NodeJS.Signals | null, error?: unknown) => {
      if (settled) return
      settled = true
      process.off('SIGTERM', forward).off('SIGINT', forward)
      signal.removeEventListener('abort', stop)
      clearTimeout(killer)
      if (error !== undefined) {
        const why = (error as { code?: string })?.code ?? oneLine(error)
        const failed = new CommandFailed(`cannot start ${JSON.stringify(file)}: ${why}`, 127)
        stderr(`pg-cron-lease: exec ${failed.message}\n`)
        return reject(failed)
      }
      if (code === 0 && lost === undefined) return resolve()
      const line = tail.trim().split('\n').at(-1)!.trim()
      const how = `${by === null ? `exit code ${code}` : `killed by ${by}`}${lost === undefined ? '' : ` after ${lost}`}`
      // A command that exits 0 once its lease is lost did not finish its run as its own: still an error.
      reject(
        new CommandFailed(line === '' ? how : `${how}: ${line}`, by === null ? code || 1 : 128 + constants.signals[by]),
      )
    }
    try {
      // stderr through a pipe, to keep its last line; stdin and stdout are the caller's own.
      child = spawn(file, args, { env, stdio: ['inherit', 'inherit', 'pipe'] })
    } catch (error) {
      return settle(null, null, error)
    }
    // Decoded as UTF-8, a character split between chunks kept whole.
    child.stderr!.setEncoding('utf8').on('data', (text: string) => {
      stderr(text)
      tail = (tail + text).slice(-TAIL)
    })
    // A spawn that failed (ENOENT, EACCES) has no pid; a failed kill of a live child changes nothing.
    child.on('error', (error) => child?.pid === undefined && settle(null, null, error))
    child.on('exit', () => setTimeout(() => child?.stderr?.destroy(), STDERR_AFTER_EXIT_MS).unref())
    child.on('close', (code, by) => settle(code, by))
    if (signal.aborted) stop()
    else signal.addEventListener('abort', stop, { once: true })
  })
}
