/** How a command ends: its exit codes, and the one-line error main prints. */
export type ExitCode = 0 | 1 | 2 | 3

// A USAGE error is found before any connection is made.
export const EXIT = { OK: 0, FAILED: 1, USAGE: 2, UNHEALTHY: 3 } as const satisfies Record<string, ExitCode>

// An error that ends the command with one line on stderr and an exit code.
export class Exit extends Error {
  constructor(
    message: string,
    readonly code: typeof EXIT.FAILED | typeof EXIT.USAGE,
  ) {
    super(message)
  }
}

export const usage = (message: string): Exit => new Exit(message, EXIT.USAGE)
export const failed = (message: string): Exit => new Exit(message, EXIT.FAILED)
