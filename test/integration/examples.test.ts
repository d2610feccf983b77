/**
 * Every file in examples/ runs here, as its own process against the test database, so no example
 * rots. Examples import 'pg-cron-lease' as users do; the package's own `exports` map resolves
 * that name (a package may import itself by name). With the `pg-cron-lease-source` condition it
 * resolves to src/index.ts, so the examples run against the code under test with no build step.
 */
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { readdirSync } from 'node:fs'
import os from 'node:os'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type pg from 'pg'
import { testDatabaseUrl, testPool } from '../../dev/postgres.ts'
import { finished } from '../helpers/child.ts'
import { parseExposition } from '../helpers/prometheus.ts'

const root = fileURLToPath(new URL('../..', import.meta.url))
const DURATION_MS = 3500
const SCHEDULER_EXAMPLES = ['node-cron-coordinator.ts', 'node-cron-callback.ts', 'croner.ts', 'set-interval.ts']
const OTHER_EXAMPLES = ['migration.ts', 'prometheus-endpoint.ts', 'nestjs.ts', 'fenced-write.ts', 'try.mjs']

interface Run {
  code: number | null
  stdout: string[]
  stderr: string
  pid: number | undefined
}

/** Runs one example; `env` entries set to undefined are removed (e.g. DATABASE_URL). */
async function runExample(file: string, env: Record<string, string | undefined> = {}): Promise<Run> {
  const url = await testDatabaseUrl()
  const childEnv: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: url,
    EXAMPLE_DURATION_MS: String(DURATION_MS),
    ...env,
  }
  for (const [key, value] of Object.entries(childEnv)) if (value === undefined) delete childEnv[key]
  const child = spawn(process.execPath, ['--conditions=pg-cron-lease-source', '--import', 'tsx', `examples/${file}`], {
    cwd: root,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  // Bounded: an example that does not exit by itself is killed, and its test fails on the code.
  const { code, stdout, stderr } = await finished(child, { killAfterMs: DURATION_MS + 30_000 })
  return { code, stdout: stdout.split('\n').filter(Boolean), stderr, pid: child.pid }
}

let pool: pg.Pool
before(async () => {
  pool = await testPool()
})
after(async () => {
  await pool.end()
})

describe('every example runs against the test database and exits by itself', () => {
  test('every file in examples/ is covered by this test', () => {
    const files = readdirSync(new URL('../../examples', import.meta.url)).filter((f) => /\.m?[jt]s$/.test(f))
    assert.deepEqual(files.sort(), [...OTHER_EXAMPLES, ...SCHEDULER_EXAMPLES].sort())
  })

  test("'pg-cron-lease' resolves to the built package, or to src/ with the pg-cron-lease-source condition", () => {
    const resolve = (...flags: string[]) =>
      execFileSync(
        process.execPath,
        [...flags, '--input-type=module', '-e', "process.stdout.write(import.meta.resolve('pg-cron-lease'))"],
        { cwd: root, encoding: 'utf8' },
      )
    assert.equal(resolve(), pathToFileURL(`${root}dist/index.mjs`).href)
    assert.equal(resolve('--conditions=pg-cron-lease-source'), pathToFileURL(`${root}src/index.ts`).href)
  })

  test('the migration example creates cron_leases through node-pg-migrate, and a second run applies nothing', async () => {
    const first = await runExample('migration.ts')
    assert.equal(first.code, 0, first.stderr)
    assert.match(first.stdout.join('\n'), /^applied (0 migration\(s\)|1 migration\(s\) 1764460800000_cron-leases)$/m)
    assert.equal(first.stdout.at(-1), 'cron_leases is ready')
    const second = await runExample('migration.ts')
    assert.equal(second.code, 0, second.stderr)
    assert.deepEqual(second.stdout, ['applied 0 migration(s)', 'cron_leases is ready'])
  })

  test('the four scheduler examples each run their job every second, then stop', async () => {
    const runs = await Promise.all(SCHEDULER_EXAMPLES.map((file) => runExample(file)))
    for (const [i, run] of runs.entries()) {
      const name = SCHEDULER_EXAMPLES[i]!.replace(/\.ts$/, '')
      const detail = `${name}: ${JSON.stringify(run)}`
      assert.equal(run.code, 0, detail)
      assert.equal(run.stderr, '', detail)
      const ran = run.stdout.filter((line) => line.startsWith(`ran example:${name} #`))
      // One replica alone wins every occurrence: a run each second for the duration.
      assert.ok(ran.length >= 2, detail)
      assert.equal(run.stdout.at(-1), `stopped after ${ran.length} runs`, detail)
      console.log(`# ${name}: ${ran.length} runs in ${DURATION_MS} ms`)
    }
    const jobs = SCHEDULER_EXAMPLES.map((f) => `example:${f.replace(/\.ts$/, '')}`).sort()
    const { rows } = await pool.query(
      `SELECT job_name FROM cron_leases WHERE job_name = ANY($1) ORDER BY job_name COLLATE "C"`,
      [jobs],
    )
    assert.deepEqual(
      rows.map((r) => r.job_name),
      jobs,
    )
  })

  test('the NestJS example runs its @Cron and its @Interval method once a second each, then stops', async () => {
    const run = await runExample('nestjs.ts')
    const detail = JSON.stringify(run)
    assert.equal(run.code, 0, detail)
    assert.equal(run.stderr, '', detail)
    for (const job of ['example:nestjs-cron', 'example:nestjs-interval']) {
      assert.ok(run.stdout.filter((line) => line.startsWith(`ran ${job} #`)).length >= 2, `${job}: ${detail}`)
    }
    const ran = run.stdout.filter((line) => line.startsWith('ran ')).length
    assert.equal(run.stdout.at(-1), `stopped after ${ran} runs`, detail)
  })

  test('the fenced write commits under the lease, makes a rival claim lose while it holds the row, and writes nothing after a takeover', async () => {
    // Twice: the example starts from a released lease, so it can run again on the same database.
    for (let i = 0; i < 2; i++) {
      const run = await runExample('fenced-write.ts')
      assert.equal(run.code, 0, run.stderr)
      assert.equal(run.stderr, '')
      assert.deepEqual(run.stdout, [
        'first write: committed',
        'rival claim while the second write is open: lost',
        'second write: committed',
        'rival claim after the commit: won',
        'third write: rolled back: the lease was taken over',
        'reports written: first, second',
      ])
    }
  })

  test('the Prometheus endpoint example serves /metrics that parse strictly, with its job in them, and stops on SIGTERM', async () => {
    const child = spawn(
      process.execPath,
      ['--conditions=pg-cron-lease-source', '--import', 'tsx', 'examples/prometheus-endpoint.ts'],
      {
        cwd: root,
        // It would serve for a minute; the test stops it as soon as it has scraped it.
        env: { ...process.env, DATABASE_URL: await testDatabaseUrl(), PORT: '0', EXAMPLE_DURATION_MS: '60000' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    )
    const done = finished(child, { killAfterMs: 60_000 })
    const address = await new Promise<string>((resolve, reject) => {
      let seen = ''
      child.stdout!.on('data', (chunk) => {
        seen += chunk
        const match = /^serving (http:\/\/\S+)$/m.exec(seen)
        if (match) resolve(match[1]!)
      })
      child.once('exit', () => reject(new Error(`the example exited before serving: ${seen}`)))
    })
    try {
      const response = await fetch(address)
      assert.equal(response.status, 200)
      assert.equal(response.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8')
      const families = parseExposition(await response.text())
      assert.deepEqual(
        [...families.keys()],
        ['pg_cron_lease_overdue', 'pg_cron_lease_last_outcome_ok', 'pg_cron_lease_last_success_age_seconds'],
      )
      const sample = (name: string) =>
        families.get(name)!.samples.find((s) => s.labels.job_name === 'example:prometheus-endpoint')?.value
      assert.equal(sample('pg_cron_lease_overdue'), 0)
      assert.equal(sample('pg_cron_lease_last_outcome_ok'), 1)
      const age = sample('pg_cron_lease_last_success_age_seconds')
      assert.ok(age !== undefined && age >= 0 && age < 60, `last success ${age} s ago`)
      assert.equal((await fetch(new URL('/', address))).status, 404)
    } finally {
      child.kill('SIGTERM')
    }
    const { code, stdout, stderr } = await done
    assert.deepEqual([code, stderr], [0, ''])
    assert.equal(stdout.trim().split('\n').at(-1), 'stopped')
  })
})

describe('examples/try.mjs, the way to try the library without a clone', () => {
  const RUN = /^(\d{2}):(\d{2}):(\d{2}\.\d{3}) {2}replica-[123] ran the job$/

  /** The run lines, checked: claims by the database clock at least one lease (800 ms) apart. */
  function checkRuns(run: Run): string[] {
    const detail = JSON.stringify(run)
    assert.equal(run.code, 0, detail)
    assert.equal(run.stderr, '', detail)
    const ran = run.stdout.filter((line) => RUN.test(line))
    assert.ok(ran.length >= 2, detail)
    const at = ran.map((line) => {
      const [, h, m, s] = RUN.exec(line)!
      return (Number(h) * 60 + Number(m)) * 60_000 + Number(s) * 1000
    })
    for (let i = 1; i < at.length; i++) {
      const gap = (at[i]! - at[i - 1]! + 86_400_000) % 86_400_000
      assert.ok(gap >= 800, `two runs ${gap} ms apart: ${detail}`)
    }
    assert.match(
      run.stdout.at(-1)!,
      new RegExp(`^${ran.length} runs \\(replica-1 \\d+, replica-2 \\d+, replica-3 \\d+\\); `),
    )
    return ran
  }

  test('with DATABASE_URL: one replica runs each second, and the table it made is dropped', async () => {
    const run = await runExample('try.mjs', { TRY_SECONDS: '3' })
    checkRuns(run)
    assert.match(run.stdout[0]!, /^Postgres: DATABASE_URL \(127\.0\.0\.1:\d+\)$/)
    const { rows } = await pool.query(`SELECT to_regclass($1) AS t`, [`try_cron_leases_${run.pid}`])
    assert.equal(rows[0].t, null)
  })

  test('without DATABASE_URL: it starts a throwaway embedded Postgres and removes its data afterwards', async () => {
    const leftovers = () => readdirSync(os.tmpdir()).filter((f) => f.startsWith('pg-cron-lease-try-'))
    const before = leftovers()
    const run = await runExample('try.mjs', { TRY_SECONDS: '3', DATABASE_URL: undefined })
    checkRuns(run)
    assert.match(run.stdout[0]!, /^Postgres: embedded, throwaway, on 127\.0\.0\.1:\d+$/)
    assert.deepEqual(leftovers(), before)
  })
})
