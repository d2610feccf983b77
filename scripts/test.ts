/**
 * The test runner behind `npm test`: starts a Postgres for each file it runs at once (unless
 * DATABASE_URL names one), runs the files through Node's test runner, three at a time on 2 cores,
 * each with a server of its own, and stops them afterwards. The output is TAP, ending with a list
 * of the failing tests (dev/test-summary.ts) and then the runner's counts.
 *
 *   node --import tsx scripts/test.ts [--pg 14|18] [--only unit|integration|tooling|browser] [files...]
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import os, { availableParallelism } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { chromiumPath, HOW_TO_GET_ONE } from '../dev/browser.ts'
import { CI, startTestServer } from '../dev/postgres.ts'

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { pg: { type: 'string' }, only: { type: 'string' } },
})
if (values.pg) process.env.PG_TEST_VERSION = values.pg

// unit: the stand-in pool; integration: real Postgres, a folder per guarantee; tooling: the
// repository's own tools (bench, demo, docs, package); browser: the dashboard in a real Chromium.
// Without a browser the last is left out, said in one line; under CI=true it runs, and fails.
const browserMissing = chromiumPath() === undefined && !CI
const suites = values.only ? [values.only] : ['unit', 'integration', 'tooling', ...(browserMissing ? [] : ['browser'])]
if (browserMissing && values.only === undefined && positionals.length === 0) {
  console.log(`# browser tests skipped: no Chromium on this machine; ${HOW_TO_GET_ONE}`)
}
const files =
  positionals.length > 0
    ? positionals
    : suites.flatMap((suite) =>
        (readdirSync(`test/${suite}`, { recursive: true }) as string[])
          .filter((f) => f.endsWith('.test.ts'))
          .sort()
          .map((f) => `test/${suite}/${f}`),
      )

/**
 * Test files at once, each with a Postgres of its own: one more than the cores, as most files wait
 * on timers and the database more than they compute, and at most this many.
 */
const PARALLEL = 3
const PICK = fileURLToPath(new URL('../dev/test-server-pick.ts', import.meta.url))
const DEPRECATIONS = fileURLToPath(new URL('../dev/deprecations.ts', import.meta.url))

// Seconds each of the slowest files took in a run of the whole suite on 2 cores, two at a time:
// started first, so that no long file is left running alone at the end. A file not listed counts as
// one second.
const SECONDS: Record<string, number> = {
  'test/integration/schedulers/examples.test.ts': 68,
  'test/browser/dashboard.test.ts': 45,
  'test/integration/dashboard/server.test.ts': 12,
  'test/tooling/package.test.ts': 45,
  'test/integration/cli/cli.test.ts': 40,
  'test/integration/cli/errors.test.ts': 22,
  'test/integration/cli/exec.test.ts': 60,
  'test/integration/otel/exec.test.ts': 11,
  'test/integration/faults/failover.test.ts': 36,
  'test/integration/schedulers/nestjs.test.ts': 36,
  'test/integration/schedulers/nestjs-12.test.ts': 36,
  'test/integration/once-per-occurrence/late-fires.test.ts': 32,
  'test/tooling/bench.test.ts': 29,
  'test/integration/schedulers/node-cron.test.ts': 28,
  'test/integration/drivers/pgbouncer.test.ts': 24,
  'test/integration/one-winner/soak.test.ts': 24,
  'test/integration/drivers/prepared.test.ts': 24,
  'test/integration/schedulers/leased-tick.test.ts': 23,
  'test/integration/one-winner/fuzz.test.ts': 22,
  'test/tooling/demo.test.ts': 38,
  'test/integration/once-per-occurrence/occurrence-soak.test.ts': 14,
  'test/integration/doctor/stacks.test.ts': 18,
  'test/integration/lease/keep-alive.test.ts': 14,
  'test/integration/older-table/ddl.test.ts': 14,
  'test/integration/pause/admin-lock-timeout.test.ts': 13,
  'test/integration/pause/pause-storm.test.ts': 11,
  'test/integration/run-history/history.test.ts': 13,
  'test/integration/older-table/occurrence-upgrade.test.ts': 9,
  'test/integration/shutdown/drain-leases.test.ts': 8,
  'test/integration/doctor/doctor.test.ts': 6,
}
const weight = (file: string) => SECONDS[file] ?? 1

// Files run side by side, slowest first, each on a server of its own (dev/test-server-pick.ts):
// the tests of a loser's writes read the whole cluster's WAL and transaction IDs. A server named
// in DATABASE_URL is one, so its files run one at a time.
const given = process.env.DATABASE_URL
const needsServer = files.some((f) => !f.startsWith('test/unit/'))
const parallel = given ? 1 : Math.min(PARALLEL, availableParallelism() + 1, files.length)
const servers = needsServer ? await Promise.all(Array.from({ length: parallel }, () => startTestServer())) : []
const locks = mkdtempSync(path.join(os.tmpdir(), 'pgcl-test-locks-'))
if (servers.length > 0) {
  process.env.DATABASE_URL = servers[0]!.url
  process.env.PG_TEST_VERSION = String(servers[0]!.major)
  process.env.PGCL_TEST_SERVERS = JSON.stringify(servers.map((s) => s.url))
  process.env.PGCL_TEST_LOCKS = locks
  const ports = servers.map((s) => s.port).join(', ')
  console.log(`# Postgres ${servers[0]!.major} on port ${ports}; ${files.length} test files, ${parallel} at a time`)
}
files.sort((a, b) => weight(b) - weight(a))

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
      [
        '--import',
        'tsx',
        '--import',
        PICK,
        '--import',
        DEPRECATIONS,
        '--test',
        `--test-concurrency=${parallel}`,
        ...BOUNDS,
        ...REPORTER,
        ...files,
      ],
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
  await Promise.all(servers.map((s) => s.stop()))
  rmSync(locks, { recursive: true, force: true })
}
process.exit(code)
