/**
 * Every file in examples/ runs here, as its own process against the test database, so no example
 * rots. Examples import 'pg-cron-lease' as users do. Plain Node resolves that name through the
 * package's own `exports` map (a package may import itself by name), to the build; under tsx the
 * `paths` of tsconfig.json map it to src/index.ts, so the examples run against the code under test
 * with no build step. They run with examples/tsconfig.json, which adds the decorators NestJS needs.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { readdirSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type pg from 'pg'
import { testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { finished } from '../../helpers/child.ts'
import { parseExposition } from '../../helpers/prometheus.ts'

const root = fileURLToPath(new URL('../../..', import.meta.url))
const DURATION_MS = 3500
const EXAMPLES_TSCONFIG = path.join(root, 'examples', 'tsconfig.json')
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
    // tsx reads the tsconfig.json of the working directory, not the one beside the file.
    TSX_TSCONFIG_PATH: EXAMPLES_TSCONFIG,
    ...env,
  }
  for (const [key, value] of Object.entries(childEnv)) if (value === undefined) delete childEnv[key]
  const child = spawn(process.execPath, ['--import', 'tsx', `examples/${file}`], {
    cwd: root,
    env: childEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  // Bounded: an example that does not exit by itself is killed, and its test fails on the code.
  const { code, stdout, stderr } = await finished(child, { killAfterMs: DURATION_MS + 30_000 })
  return { code, stdout: stdout.split('\n').filter(Boolean), stderr, pid: child.pid }
}

/**
 * What an example printed on stderr, less the `cron` package's report that its own timer fired
 * late ("[Cron] Missed execution deadline by 2ms …"): @nestjs/schedule's @Cron prints it whenever
 * the event loop is a millisecond behind, which a loaded machine makes common. It is the
 * scheduler speaking of its timer, not the library or the example reporting a fault.
 */
function ownStderr(stderr: string): string {
  return stderr.replace(/^\[Cron\] Missed execution deadline by \d+ms for job.*\n?/gm, '')
}

/**
 * The jobs of the scheduler recipes, and whether each names its occurrence: a cron schedule names
 * the slot of each fire, a timer (`setInterval`, `@Interval`) none, and declares its interval.
 */
const RECIPE_JOBS: Record<string, 'occurrence' | 'interval'> = {
  'example:node-cron-coordinator': 'occurrence',
  'example:node-cron-callback': 'occurrence',
  'example:croner': 'occurrence',
  'example:set-interval': 'interval',
  'example:nestjs-cron': 'occurrence',
  'example:nestjs-interval': 'interval',
}
const INTERVAL_MS = 1000 // every recipe's job runs each second

/** The occurrence a recipe's run line names (`ran <job> #<n> for <ISO-8601>`), in ms; undefined when none. */
function occurrenceOf(line: string): number | undefined {
  const iso = / for (\S+)/.exec(line)?.[1]
  return iso === undefined ? undefined : Date.parse(iso)
}

/**
 * Checks that a recipe's runs reached the table keyed as the recipe means them: for a cron
 * schedule, every run names an occurrence, each later than the one before (no occurrence runs
 * twice, nor an earlier one after a later), and the row keeps the last one run; for a timer, no
 * occurrence is stored. Either way the last claim stored the job as next due after the claim, at
 * most one interval on: the scheduler's next fire, carried across as a duration. (At most, and
 * for a cron schedule at least 0 rather than more: the next fire was read before the claim was
 * sent, within the same millisecond at worst.)
 */
async function checkOccurrences(job: string, ranLines: string[], detail: string): Promise<void> {
  const { rows } = await pool.query(
    `SELECT (extract(epoch FROM date_trunc('milliseconds', last_occurrence)) * 1000)::float8 AS last_occurrence_ms,
       (extract(epoch FROM next_due_at - claimed_at) * 1000)::float8 AS due_after_claim_ms
     FROM cron_leases WHERE job_name = $1`,
    [job],
  )
  assert.equal(rows.length, 1, `${job}: one row: ${detail}`)
  const [{ last_occurrence_ms: lastOccurrence, due_after_claim_ms: dueAfterClaim }] = rows
  const named = ranLines.map(occurrenceOf)
  if (RECIPE_JOBS[job] === 'occurrence') {
    assert.ok(
      named.every((ms) => ms !== undefined && Number.isFinite(ms)),
      `${job}: every run names its occurrence: ${detail}`,
    )
    const ms = named as number[]
    for (let i = 1; i < ms.length; i++)
      assert.ok(ms[i]! > ms[i - 1]!, `${job}: run ${i + 1} is for a later occurrence: ${detail}`)
    assert.equal(lastOccurrence, ms.at(-1), `${job}: the row keeps the last occurrence run: ${detail}`)
    assert.ok(
      dueAfterClaim !== null && dueAfterClaim >= 0 && dueAfterClaim <= INTERVAL_MS,
      `${job}: next due ${dueAfterClaim} ms after the claim: ${detail}`,
    )
  } else {
    assert.deepEqual(
      named,
      ranLines.map(() => undefined),
      `${job}: a timer names no occurrence: ${detail}`,
    )
    assert.equal(lastOccurrence, null, `${job}: no occurrence stored: ${detail}`)
    assert.ok(
      dueAfterClaim !== null && dueAfterClaim > 0 && dueAfterClaim <= INTERVAL_MS,
      `${job}: next due ${dueAfterClaim} ms after the claim: ${detail}`,
    )
  }
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
    const files = readdirSync(new URL('../../../examples', import.meta.url)).filter((f) => /\.m?[jt]s$/.test(f))
    assert.deepEqual(files.sort(), [...OTHER_EXAMPLES, ...SCHEDULER_EXAMPLES].sort())
  })

  test("'pg-cron-lease' resolves to the built package, and under tsx in the repository to src/", () => {
    const resolve = (...flags: string[]) =>
      execFileSync(
        process.execPath,
        [...flags, '--input-type=module', '-e', "process.stdout.write(import.meta.resolve('pg-cron-lease'))"],
        { cwd: root, encoding: 'utf8' },
      )
    assert.equal(resolve(), pathToFileURL(`${root}dist/index.mjs`).href)
    assert.equal(resolve('--import', 'tsx'), pathToFileURL(`${root}src/index.ts`).href)
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

  test('the four scheduler examples each run their job every second, keyed on its occurrence or its interval, then stop', async () => {
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
      await checkOccurrences(`example:${name}`, ran, detail)
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

  test('the NestJS example runs its @Cron method for each slot and its @Interval method once a second, then stops', async () => {
    const run = await runExample('nestjs.ts')
    const detail = JSON.stringify(run)
    assert.equal(run.code, 0, detail)
    assert.equal(ownStderr(run.stderr), '', detail)
    for (const job of ['example:nestjs-cron', 'example:nestjs-interval']) {
      const ran = run.stdout.filter((line) => line.startsWith(`ran ${job} #`))
      assert.ok(ran.length >= 2, `${job}: ${detail}`)
      await checkOccurrences(job, ran, detail)
    }
    // The @Cron method's occurrence is its schedule's slot, a whole second, not when its timer fired.
    const slots = run.stdout.filter((line) => line.startsWith('ran example:nestjs-cron #')).map(occurrenceOf)
    assert.deepEqual(
      slots.filter((ms) => ms! % 1000 !== 0),
      [],
      detail,
    )
    const ran = run.stdout.filter((line) => line.startsWith('ran ')).length
    assert.equal(run.stdout.at(-1), `stopped after ${ran} runs`, detail)
  })

  test('the fenced write commits under the lease, makes a rival claim lose while its transaction is open on a lease that ran out, and writes nothing after a takeover', async () => {
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
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/prometheus-endpoint.ts'], {
      cwd: root,
      // It would serve for a minute; the test stops it as soon as it has scraped it.
      env: { ...process.env, DATABASE_URL: await testDatabaseUrl(), PORT: '0', EXAMPLE_DURATION_MS: '60000' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
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

/** Resolves once the child has printed a line matching `pattern`; rejects if it exits first. */
function printed(child: ChildProcess, pattern: RegExp): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = ''
    const onData = (chunk: Buffer) => {
      seen += chunk
      if (seen.split('\n').some((line) => pattern.test(line))) {
        child.stdout!.off('data', onData)
        resolve()
      }
    }
    child.stdout!.on('data', onData)
    child.once('close', () => reject(new Error(`the example exited before printing ${pattern}: ${seen}`)))
  })
}

/** Polls `condition` until it holds; fails after `timeoutMs`, so a state never reached fails the test. */
async function until(what: string, condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`not reached within ${timeoutMs} ms: ${what}`)
    await delay(20)
  }
}

describe('an example stopped while a tick is in flight ends its pool only after that tick', () => {
  // While the test holds a lock on cron_leases, every claim of the example waits on it: a tick is
  // then in flight for as long as the test wants, and the stop is sent exactly then. A shutdown that
  // ends the pool first fails the tick's next statement ("Cannot use a pool after calling end on
  // the pool"), which the example prints on stderr.
  for (const file of [...SCHEDULER_EXAMPLES, 'nestjs.ts']) {
    const name = file.replace(/\.ts$/, '')
    test(`${name}: SIGTERM during a claim lets that tick run and record, then ends the pool and exits 0`, async () => {
      const url = new URL(await testDatabaseUrl())
      url.searchParams.set('application_name', `example-${name}`)
      const child = spawn(process.execPath, ['--import', 'tsx', `examples/${file}`], {
        cwd: root,
        env: {
          ...process.env,
          DATABASE_URL: url.href,
          EXAMPLE_DURATION_MS: '60000',
          TSX_TSCONFIG_PATH: EXAMPLES_TSCONFIG,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      const done = finished(child, { killAfterMs: 60_000 })
      await printed(child, /^ran /)
      const locker = await pool.connect()
      try {
        // Held only from a moment when every run the example won is recorded: a record left waiting
        // on the lock would hold the job's row when the lock goes, and the waiting claim would lose.
        await until(`every run of ${name} is recorded`, async () => {
          await locker.query('BEGIN')
          await locker.query('LOCK TABLE cron_leases IN EXCLUSIVE MODE')
          const unrecorded = await locker.query(
            `SELECT count(*)::int AS n FROM cron_leases WHERE job_name LIKE $1
               AND coalesce(last_started_at > last_finished_at, last_started_at IS NOT NULL)`,
            [`example:${name}%`],
          )
          if (unrecorded.rows[0].n === 0) return true
          await locker.query('COMMIT')
          return false
        })
        const { rows } = await locker.query('SELECT pg_backend_pid() AS pid')
        // Polled from another connection: inside a transaction, pg_stat_activity is read once.
        await until(`a claim of ${name} waits on the lock`, async () => {
          const waiting = await pool.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE application_name = $1 AND $2::int = ANY(pg_blocking_pids(pid))
               AND (query LIKE 'INSERT INTO "cron_leases" AS lease%' OR query LIKE 'WITH before AS MATERIALIZED%')`,
            [`example-${name}`, rows[0].pid],
          )
          return waiting.rows[0].n > 0
        })
        child.kill('SIGTERM')
        await printed(child, /^stopping$/)
        // Let go only once every lease of the example has run out by the database clock (the lock
        // keeps anyone from moving one): a catch-up run at start can hold its lease into the second
        // after, and a claim let go inside it would lose, as it should.
        await locker.query(
          `SELECT pg_sleep(greatest(0, extract(epoch FROM max(lease_until) - clock_timestamp())))
           FROM cron_leases WHERE job_name LIKE $1`,
          [`example:${name}%`],
        )
      } catch (error) {
        child.kill('SIGKILL')
        throw error
      } finally {
        await locker.query('COMMIT')
        locker.release()
      }
      const run = await done
      const detail = JSON.stringify(run)
      assert.equal(run.code, 0, detail)
      assert.equal(ownStderr(run.stderr), '', detail)
      const stdout = run.stdout.split('\n').filter(Boolean)
      // The claim that waited on the lock won once it was let go: its tick ran after the stop began.
      assert.ok(
        stdout.slice(stdout.indexOf('stopping')).some((line) => line.startsWith('ran ')),
        detail,
      )
      const ran = stdout.filter((line) => line.startsWith('ran ')).length
      assert.equal(stdout.at(-1), `stopped after ${ran} runs`, detail)
    })
  }

  test('prometheus-endpoint: a scrape whose request arrives after SIGTERM on an open connection is still served, then it exits 0', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/prometheus-endpoint.ts'], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: await testDatabaseUrl(), PORT: '0', EXAMPLE_DURATION_MS: '60000' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const done = finished(child, { killAfterMs: 60_000 })
    let port = 0
    child.stdout!.on('data', (chunk) => {
      port ||= Number(/^serving http:\/\/127\.0\.0\.1:(\d+)\//m.exec(String(chunk))?.[1] ?? 0)
    })
    await printed(child, /^serving /)
    // Half a request: the connection is open and busy, and the scrape's query is not yet sent.
    const socket = net.connect(port, '127.0.0.1')
    let response = ''
    socket.on('data', (chunk) => {
      response += chunk
    })
    const closed = new Promise((resolve) => socket.once('close', resolve))
    try {
      await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject))
      socket.write('GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n')
      child.kill('SIGTERM')
      await printed(child, /^stopping$/)
      socket.write('\r\n')
      await closed
    } finally {
      socket.destroy()
    }
    assert.match(response, /^HTTP\/1\.1 200 OK\r\n/, response)
    assert.match(response, /pg_cron_lease_overdue\{job_name="example:prometheus-endpoint"\} 0/, response)
    const run = await done
    assert.deepEqual([run.code, run.stderr], [0, ''], JSON.stringify(run))
    assert.equal(run.stdout.trim().split('\n').at(-1), 'stopped')
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
