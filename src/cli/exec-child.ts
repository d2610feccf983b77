/** exec's command as a child process: the caller's stdio and environment, signals forwarded, stopped when the lease is lost. */
import { type ChildProcess, spawn } from 'node:child_process'
import { constants } from 'node:os'
import { StringDecoder } from 'node:string_decoder'
import { oneLine } from './exit.js'
import { duration } from './human.js'

/**
 * A run of the command that did not end with exit code 0, as the run history records it
 * (`exec: exit code 3: <last line of stderr>`), with the exit code `exec` ends with.
 *
 * @example
 * throw new CommandFailed('exit code 3: disk full', 3)
 */
export class CommandFailed extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message)
    this.name = 'exec'
  }
}

/** What the child is started with; `stderr` receives its stderr as it comes. */
export interface ChildOptions {
  env: Readonly<Record<string, string | undefined>>
  signal: AbortSignal
  killAfterMs: number
  stderr(text: string): void
}

// The longest stderr line kept; the history keeps 500 characters of an error.
const LINE_LIMIT = 1000
// How long after its exit the command's stderr may stay open (a child of its own holds it) before it is cut.
const STDERR_AFTER_EXIT_MS = 1000

/**
 * Runs `argv` to its end: resolves when it exits 0, else rejects with a {@link CommandFailed}
 * (127 when it cannot be started, 128 + n when signal n ended it).
 *
 * @example
 * await runCommand(['pg_dump', 'shop'], { env: process.env, signal: ctx.signal, killAfterMs: 10_000, stderr: write })
 */
export function runCommand(argv: string[], options: ChildOptions): Promise<void> {
  const { env, signal, killAfterMs, stderr } = options
  const [file, ...args] = argv as [string, ...string[]]
  return new Promise((resolve, reject) => {
    const notStarted = (error: unknown) => {
      const why = (error as { code?: string })?.code ?? oneLine(error)
      const failed = new CommandFailed(`cannot start ${JSON.stringify(file)}: ${why}`, 127)
      stderr(`pg-cron-lease: exec ${failed.message}\n`)
      reject(failed)
    }
    // Forwarded, and waited for: exec ends after its command, leaving no orphan behind. Listened
    // for before the spawn: a signal between the two would end exec and leave the command running.
    let child: ChildProcess | undefined
    const forward = (name: NodeJS.Signals) => child?.kill(name)
    process.on('SIGTERM', forward)
    process.on('SIGINT', forward)
    try {
      // stderr through a pipe, to keep its last line; stdin and stdout are the caller's own.
      child = spawn(file, args, { env: env as NodeJS.ProcessEnv, stdio: ['inherit', 'inherit', 'pipe'] })
    } catch (error) {
      process.off('SIGTERM', forward)
      process.off('SIGINT', forward)
      notStarted(error)
      return
    }
    const started = child
    const last = lastLine()
    const decoder = new StringDecoder('utf8')
    started.stderr!.on('data', (chunk: Buffer) => {
      const text = decoder.write(chunk)
      stderr(text)
      last.add(text)
    })
    let lost: string | undefined
    let killer: NodeJS.Timeout | undefined
    // The lease can no longer be kept, so another host may soon run the job: the command must stop.
    const stop = () => {
      lost = oneLine(signal.reason).replace(/^pg-cron-lease: /, '')
      stderr(`pg-cron-lease: ${lost}; stopping the command: SIGTERM, then SIGKILL after ${duration(killAfterMs)}\n`)
      started.kill('SIGTERM')
      killer = setTimeout(() => started.kill('SIGKILL'), killAfterMs)
    }
    if (signal.aborted) stop()
    else signal.addEventListener('abort', stop, { once: true })
    let settled = false
    const settle = (code: number | null, by: NodeJS.Signals | null, error?: unknown) => {
      if (settled) return
      settled = true
      process.off('SIGTERM', forward)
      process.off('SIGINT', forward)
      signal.removeEventListener('abort', stop)
      clearTimeout(killer)
      if (error !== undefined) return notStarted(error)
      if (code === 0 && lost === undefined) return resolve()
      const how = by === null ? `exit code ${code}` : `killed by ${by}`
      const line = last.get()
      const message = `${how}${lost === undefined ? '' : ` after ${lost}`}${line === '' ? '' : `: ${line}`}`
      const exitCode = by === null ? code || 1 : 128 + (constants.signals[by] ?? 0)
      reject(new CommandFailed(message, exitCode))
    }
    // A spawn that failed (ENOENT, EACCES) has no pid; a failed kill of a live child changes nothing.
    started.on('error', (error) => started.pid === undefined && settle(null, null, error))
    started.on('exit', () => setTimeout(() => started.stderr!.destroy(), STDERR_AFTER_EXIT_MS).unref())
    started.on('close', (code, by) => settle(code, by))
  })
}

/** The last line of text written in chunks: the unfinished one if any, else the last non-blank. */
function lastLine() {
  let partial = ''
  let complete = ''
  return {
    add(text: string) {
      const lines = (partial + text).split('\n')
      partial = lines.pop()!.slice(-LINE_LIMIT)
      const found = lines.map((l) => l.trim()).findLast((l) => l !== '')
      if (found !== undefined) complete = found.slice(-LINE_LIMIT)
    },
    get: () => partial.trim() || complete,
  }
}
