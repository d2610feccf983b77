/**
 * How a `pg-cron-lease` command ends early: one line on stderr and an exit code. Every part of the
 * command throws these; the entry point prints them.
 */

/** 1: the database (or the `pg` driver) could not do it; 2: a usage error. */
export type ExitCode = 1 | 2

/** An error that ends the command with one line on stderr and an exit code. */
export class Exit extends Error {
  constructor(
    message: string,
    readonly code: ExitCode,
  ) {
    super(message)
  }
}

export const usage = (message: string): Exit => new Exit(message, 2)

/** An error's message on one line, for a one-line report. */
export function oneLine(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error)
  return message.replace(/\s*\n\s*/g, ' ').trim() || String((error as { code?: unknown })?.code ?? 'unknown error')
}
