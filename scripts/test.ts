/**
 * The test runner behind `npm test`: starts one Postgres for the whole run (unless DATABASE_URL
 * names one), hands it to Node's test runner in DATABASE_URL, and stops it afterwards. The output
 * is TAP, ending with a list of the failing tests (dev/test-summary.ts) and then the runner's counts.
 *
 *   node --import tsx scripts/test.ts [--pg 14|18] [--only unit|integration|tooling] [files...]
 */
import { spawn } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { startTestServer } from '../dev/postgres.ts'

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { pg: { type: 'string' }, only: { type: 'string' } },
})
if (values.pg) process.env.PG_TEST_VERSION = values.pg

// unit: the stand-in pool; integration: real Postgres, a folder per guarantee; tooling: the
// repository's own tools (bench, demo, docs, package).
const suites = values.only ? [values.only] : ['unit', 'integration', 'tooling']
const files =
  positionals.length > 0
    ? positionals
    : suites.flatMap((suite) =>
        (readdirSync(`test/${suite}`, { recursive: true }) as string[])
          .filter((f) => f.endsWith('.test.ts'))
          .sort()
          .map((f) => `test/${suite}/${f}`),
      )

// The unit suite never touches a database, so it does not wait for one.
const server = files.some((f) => !f.startsWith('test/unit/')) ? await startTestServer() : undefined
if (server) {
  process.env.DATABASE_URL = server.url
  process.env.PG_TEST_VERSION = String(server.major)
  console.log(`# Postgres ${server.major} on port ${server.port}; ${files.length} test files`)
}

// Node's TAP output on every Node version (spec is the default from Node 23 on), and before its
// closing counts, the failing tests by file and full name.
const REPORTER = [
  `--test-reporter=${fileURLToPath(new URL('../dev/test-reporter.mjs', import.meta.url))}`,
  '--test-reporter-destination=stdout',
]

// Every test is bounded, and a file whose test left a loop or a timer running still ends: a test
// that hangs fails in minutes, never holds the suite.
const BOUNDS = ['--test-timeout=120000']

let code = 1
try {
  code = await new Promise<number>((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--test', '--test-concurrency=1', ...BOUNDS, ...REPORTER, ...files],
      {
        stdio: 'inherit',
      },
    )
    const forward = (signal: NodeJS.Signals) => child.kill(signal)
    process.once('SIGINT', forward)
    process.once('SIGTERM', forward)
    child.on('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0)))
  })
  // Set now, so the run still fails if anything after this point ends the process early.
  process.exitCode = code
} finally {
  await server?.stop()
}
process.exit(code)
