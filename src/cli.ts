#!/usr/bin/env node
/** The `pg-cron-lease` bin: binds src/cli/main.ts, where everything the command does is, to this process. */
import { main } from './cli/main.js'

// `status | head` closes the pipe early; that is not an error worth a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0)
  throw error
})

process.exitCode = await main(process.argv.slice(2), process)
