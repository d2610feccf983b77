/** What one `pg-cron-lease` command is; each is a module of its own, and src/cli/main.ts lists them. */
import type pg from 'pg'
import type { Accepts, OptionName, Values } from './args.js'
import type { Target } from './connect.js'
import type { ExitCode } from './exit.js'
import type { Paint } from './human.js'

/** What a command runs with: where it prints, and how it reaches the database. */
export interface Context {
  /** Writes to stdout; `paint` holds the colours for it. */
  out(text: string): void
  paint: Paint
  /** Runs `work` on one client connected to --url or DATABASE_URL; failures are an exit 1. */
  connect<T>(work: (client: pg.Client, target: Target) => Promise<T>): Promise<T>
}

export interface Command extends Accepts {
  summary: string
  /** Help for an option where this command's differs from the one in OPTIONS. */
  optionHelp?: Partial<Record<OptionName, string>>
  details: string
  exitCodes: string
  /** Runs with values already checked; resolves the exit code, or throws an Exit. */
  run(values: Values, context: Context): Promise<ExitCode>
}

/** The exit 1 of every command that reads the database, as its help says it. */
export const DATABASE_EXIT = '1 the database cannot be reached or read (or pg is not installed)'
