/**
 * The pg-cron-lease bin, run as a child process against the test database: what needs a real
 * process or a real database. It is built from tsdown.config.ts into a temporary directory laid out
 * like an installed package (package.json, dist/cli.mjs, node_modules), so what runs is the file
 * the package ships, not the TS source. Parsing, help, usage errors and every renderer are tested
 * in-process, without a database, in test/unit/cli-*.test.ts.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chmodSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { before, describe, test } from 'node:test'
import type pg from 'pg'
import { expireLease, freePort, freshTable } from '../../../dev/postgres.ts'
import { createTableSql, type LeaseInfo, listLeases, pauseJob, withCronLease } from '../../../src/index.ts'
import { finished } from '../../helpers/child.ts'
import { assertFails, BIN_PATH, ROOT, useBuiltBin } from '../../helpers/cli-bin.ts'
import { parseExposition } from '../../helpers/prometheus.ts'

/** An ANSI SGR sequence (colour on or off) with any code. */
const SGR = new RegExp(`${String.fromCharCode(27)}\\[\\d+m`)

const PACKAGE = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'))
const { built, ready, cli } = useBuiltBin()
let pool: pg.Pool
/** Another replica's pool: what the admin commands must reach. */
let replica: pg.Pool
let url: string
before(async () => {
  ;({ pool, replica, url } = await ready)
})

const ISO_MICROS = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{6}Z'

/** Every date-time in a line of output is ISO-8601 UTC text with a 4-digit year, as `new Date()` reads it. */
function assertReadableTimes(text: string) {
  for (const [time] of text.matchAll(/[+-]?\d{4,}-\d\d-\d\dT[\d:.]+Z?/g)) {
    assert.match(time, new RegExp(`^${ISO_MICROS}$`), `a readable time: ${time}`)
    assert.ok(!Number.isNaN(new Date(time).getTime()), `new Date() reads ${time}`)
  }
}

/** Microseconds since the epoch of an ISO-8601 UTC text with microseconds, exactly. */
function micros(iso: string): bigint {
  assert.match(iso, new RegExp(`^${ISO_MICROS}$`))
  return BigInt(Date.parse(`${iso.slice(0, 19)}Z`)) * 1000n + BigInt(iso.slice(20, 26))
}

/** Sets a lease's claim and expiry relative to the database clock; its run, if it marked one, started with it. */
async function setTimes(table: string, jobName: string, claimedAgo: string, until: string) {
  await pool.query(
    `UPDATE "${table}" SET claimed_at = clock_timestamp() - $2::interval, lease_until = clock_timestamp() + $3::interval
     WHERE job_name = $1`,
    [jobName, claimedAgo, until],
  )
  // A table of the original shape marks no run.
  await pool
    .query(`UPDATE "${table}" SET last_started_at = claimed_at WHERE job_name = $1 AND last_started_at IS NOT NULL`, [
      jobName,
    ])
    .catch((error: { code?: string }) => {
      if (error.code !== '42703') throw error
    })
}

/** Sets the last recorded run relative to the database clock; a failed run leaves no success. */
async function setRun(
  table: string,
  jobName: string,
  run: { finishedAgo: string; outcome: 'ok' | 'error' | null; durationMs: number; error?: string; everyMs?: number },
) {
  await pool.query(
    `UPDATE "${table}" SET last_finished_at = clock_timestamp() - $2::interval, last_outcome = $3::text,
       last_duration_ms = $4::float8, last_error = $5::text, every_ms = $6::float8,
       last_success_at = CASE WHEN $3::text = 'ok' THEN clock_timestamp() - $2::interval END
     WHERE job_name = $1`,
    [jobName, run.finishedAgo, run.outcome, run.durationMs, run.error ?? null, run.everyMs ?? null],
  )
}

/**
 * A table with one job of each kind. Times are set relative to the database clock with margins of
 * half a unit, so the rounded-down ages stay the same however slowly the test runs.
 * - billing:hourly       held, last run ok, every 1 h: healthy
 * - import:nightly       claimed 3 h 20 min ago, every 1 h: 2 h 20 min late: OVERDUE (grace 1 min)
 * - legacy               a row written without a holder, no run recorded
 * - report:daily         last run failed, never succeeded: FAILING
 * - sync:failing-paused  last run failed, paused until resumed: FAILING and PAUSED
 * - sync:paused          claimed 3 h 20 min ago, every 1 h, paused for 2 h 30 min: PAUSED, not overdue
 * - unknown:outcome      last run recorded without an outcome (as a node-cron coordinator run is)
 */
async function severalJobs(): Promise<string> {
  const table = await freshTable(pool, 'cli_jobs')
  const claim = async (jobName: string, holder: string, claimedAgo: string, until: string) => {
    await withCronLease(pool, jobName, 60_000, () => {}, { table, holder })
    await setTimes(table, jobName, claimedAgo, until)
  }
  await claim('billing:hourly', 'web-1:4242', '3 min 10 s', '47 min 30 s')
  await setRun(table, 'billing:hourly', {
    finishedAgo: '2 min 30 s',
    outcome: 'ok',
    durationMs: 4180,
    everyMs: 3_600_000,
  })
  await claim('import:nightly', 'web-2:77', '3 h 20 min', '-2 h -20 min')
  await setRun(table, 'import:nightly', {
    finishedAgo: '3 h 10 min',
    outcome: 'ok',
    durationMs: 65_000,
    everyMs: 3_600_000,
  })
  await pool.query(`INSERT INTO "${table}" (job_name, lease_until) VALUES ('legacy', clock_timestamp())`)
  await setTimes(table, 'legacy', '10 min 30 s', '20 min 30 s')
  await claim('report:daily', 'web-3', '6 min 30 s', '-5 min -30 s')
  await setRun(table, 'report:daily', {
    finishedAgo: '5 min 30 s',
    outcome: 'error',
    durationMs: 850,
    error: 'Error: boom',
  })
  await claim('sync:failing-paused', 'web-4', '6 min 30 s', '-5 min -30 s')
  await setRun(table, 'sync:failing-paused', {
    finishedAgo: '5 min 30 s',
    outcome: 'error',
    durationMs: 850,
    error: 'TypeError: no such row',
  })
  assert.equal(await pauseJob(pool, 'sync:failing-paused', { table }), true)
  await claim('sync:paused', 'web-4', '3 h 20 min', '-2 h')
  await setRun(table, 'sync:paused', { finishedAgo: '3 h 10 min', outcome: 'ok', durationMs: 4180, everyMs: 3_600_000 })
  assert.equal(await pauseJob(pool, 'sync:paused', { table, forMs: 150 * 60_000 }), true)
  await claim('unknown:outcome', 'web-5', '3 min 10 s', '47 min 30 s')
  await setRun(table, 'unknown:outcome', { finishedAgo: '2 min 30 s', outcome: null, durationMs: 0.4 })
  return table
}

/** The database clock now, in ms since the epoch: occurrences are named by it, not by this machine's. */
async function databaseNowMs(): Promise<number> {
  return (await pool.query('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms')).rows[0].ms
}

/**
 * A table with jobs whose schedulers name their occurrences, written by real claims, and one
 * without:
 * - billing:hourly  its occurrence 30 s ago claimed, every 1 h: next due in 59 min 30 s, healthy
 * - import:nightly  claimed 3 h 20 min ago without an occurrence, every 1 h: OVERDUE by the interval
 * - report:5min     occurrences 20 and 5 min ago claimed, every 5 min, so the 2 between them are
 *                   missed; its next one fell due 4 min 30 s ago (set with SQL) and nobody claimed
 *                   it: OVERDUE by its due time, with the default grace of 1 min
 * As in severalJobs, the margins are half a unit, so the rounded-down ages stay put however slowly
 * the test runs.
 */
async function occurrenceJobs(): Promise<{ table: string; missedAtClaim: number }> {
  const table = await freshTable(pool, 'cli_due')
  const now = await databaseNowMs()
  const claim = async (jobName: string, occurrenceMs: number, everyMs: number) => {
    let missed = -1
    const { ran } = await withCronLease(
      pool,
      jobName,
      60_000,
      (ctx) => {
        missed = ctx.missed
      },
      { table, holder: 'web-1', occurrence: new Date(occurrenceMs), everyMs },
    )
    assert.equal(ran, true, `${jobName} at ${new Date(occurrenceMs).toISOString()} wins`)
    return missed
  }
  await claim('billing:hourly', now - 30_000, 3_600_000)
  await withCronLease(pool, 'import:nightly', 60_000, () => {}, { table, holder: 'web-2' })
  await setTimes(table, 'import:nightly', '3 h 20 min', '-2 h -20 min')
  await setRun(table, 'import:nightly', {
    finishedAgo: '3 h 10 min',
    outcome: 'ok',
    durationMs: 1000,
    everyMs: 3_600_000,
  })
  await claim('report:5min', now - 20 * 60_000, 300_000)
  await expireLease(pool, table, 'report:5min')
  const missedAtClaim = await claim('report:5min', now - 5 * 60_000, 300_000)
  await pool.query(
    // As a fleet that stopped would leave it: the last claim before the due time, none since.
    `UPDATE "${table}" SET next_due_at = clock_timestamp() - interval '4 min 30 s',
       claimed_at = clock_timestamp() - interval '9 min 30 s',
       lease_until = clock_timestamp() - interval '4 min' WHERE job_name = 'report:5min'`,
  )
  return { table, missedAtClaim }
}

/** A lease table of the original shape: the four first columns, none for outcomes or pauses. */
async function oldShapeTable(): Promise<string> {
  const table = `cli_old_${randomBytes(5).toString('hex')}`
  await pool.query(
    `CREATE TABLE "${table}" (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL, holder TEXT,
       claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`,
  )
  return table
}

/** Whether a claim made now by another replica (its own pool) wins. */
async function replicaWins(table: string, jobName: string): Promise<boolean> {
  return (await withCronLease(replica, jobName, 60_000, () => {}, { table, holder: 'replica-2' })).ran
}

describe('the package ships the bin it declares', () => {
  test('package.json bin names dist/cli.mjs, a Node script with a shebang that runs on its own', async () => {
    assert.deepEqual(PACKAGE.bin, { 'pg-cron-lease': './dist/cli.mjs' })
    const file = path.join(built.installed, BIN_PATH)
    assert.match(readFileSync(file, 'utf8'), /^#!\/usr\/bin\/env node\n/)
    chmodSync(file, 0o755)
    const run = await finished(spawn(file, ['sql'], { env: { ...process.env, NO_COLOR: '1' } }))
    assert.deepEqual([run.code, run.stdout], [0, createTableSql()])
  })

  test('--version prints the package version', async () => {
    assert.deepEqual(await cli(['--version']), { code: 0, stdout: `${PACKAGE.version}\n`, stderr: '' })
  })
})

describe('exit codes, end to end', () => {
  test('--help exits 0 with the help on stdout; with no command the same help goes to stderr with exit 2', async () => {
    const help = await cli(['--help'])
    assert.deepEqual([help.code, help.stderr], [0, ''])
    assert.match(help.stdout, /^Usage: pg-cron-lease <command> \[options\]\n/)
    assert.deepEqual(await cli([]), { code: 2, stdout: '', stderr: help.stdout })
  })

  test('a usage error exits 2 with one line for every command, before connecting', async () => {
    // An unreachable database: a usage error must be found without it.
    const env = { DATABASE_URL: `postgres://a:b@127.0.0.1:${await freePort()}/x` }
    for (const [args, message] of [
      [['sql', '--bogus'], /unknown option --bogus for sql/],
      [['migrate', '--table', 'a.b.c'], /--table must be/],
      [['status', '--format', 'xml'], /--format must be text, json or prometheus/],
      [['check', '--job'], /--job needs a value/],
      [['pause', 'a', '--for', '90'], /--for must be a duration/],
      [['resume'], /resume needs the name of a job/],
      [['release', 'a', 'b'], /release takes one job, got 2/],
      [['frob'], /unknown command "frob"/],
    ] as const) {
      assertFails(await cli([...args], env), 2, message)
    }
  })
})

describe('migrate creates the table, upgrades an older one, and running it again changes nothing', () => {
  test('first run creates, second run says it exists; both exit 0 and claims then work', async () => {
    const table = `cli_migrate_${process.pid}`
    await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_runs"`)
    const target = `${new URL(url).hostname}:${new URL(url).port}/${new URL(url).pathname.slice(1)}`
    assert.deepEqual(await cli(['migrate', '--table', table]), {
      code: 0,
      stdout: `Created table ${table} and its run history ${table}_runs in ${target}.\n`,
      stderr: '',
    })
    assert.deepEqual(await cli(['migrate', '--table', table]), {
      code: 0,
      stdout: `Table ${table} already exists in ${target} and is up to date; nothing to do.\n`,
      stderr: '',
    })
    const { ran } = await withCronLease(pool, 'after-migrate', 60_000, () => {}, { table })
    assert.equal(ran, true)
    await pool.query(`DROP TABLE "${table}", "${table}_runs"`)
  })

  test('a table of the original shape is upgraded with the columns it lacks, then is up to date; claims record outcomes', async () => {
    const table = await oldShapeTable()
    const target = `${new URL(url).hostname}:${new URL(url).port}/${new URL(url).pathname.slice(1)}`
    const columns = async () =>
      (await pool.query('SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = $1', [table]))
        .rows[0].n
    const fresh = await freshTable(pool, 'cli_columns')
    const full = (
      await pool.query('SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = $1', [fresh])
    ).rows[0].n
    assert.equal(await columns(), 4)
    assert.deepEqual(await cli(['migrate', '--table', table]), {
      code: 0,
      stdout: `Upgraded table ${table} in ${target}: added ${full - 4} columns for outcomes, pauses, occurrence keys and the history, and created its run history ${table}_runs.\n`,
      stderr: '',
    })
    assert.equal(await columns(), full, 'every column of createTableSql')
    assert.deepEqual(await cli(['migrate', '--table', table]), {
      code: 0,
      stdout: `Table ${table} already exists in ${target} and is up to date; nothing to do.\n`,
      stderr: '',
    })
    await withCronLease(pool, 'after-upgrade', 60_000, () => {}, { table })
    const [lease] = await listLeases(pool, { table })
    assert.equal(lease?.lastOutcome, 'ok', 'the upgraded table records how a run ended')
  })

  test('a schema that does not exist is a database error that says to create it', async () => {
    assertFails(
      await cli(['migrate', '--table', 'no_such_schema.leases']),
      1,
      /schema "no_such_schema" does not exist, so no_such_schema\.leases cannot be created; create the schema first/,
    )
  })
})

describe('status reads the real rows, by the database clock', () => {
  test('a readable table: holder, claim, expiry, last run, its duration and a FAILING / OVERDUE / PAUSED marker', async () => {
    const table = await severalJobs()
    const run = await cli(['status', '--table', table])
    assert.equal(run.code, 0, run.stderr)
    assert.equal(run.stderr, '')
    const paused = (await listLeases(pool, { table })).find((l) => l.jobName === 'sync:paused')!
    const lines = run.stdout.split('\n')
    assert.match(
      lines[0]!,
      new RegExp(`^${table}: 7 jobs, 5 held, 2 failing, 1 overdue, 2 paused \\(database clock ${ISO_MICROS}\\)$`),
    )
    assert.equal(lines[1], '')
    assert.deepEqual(
      lines.slice(2).map((l) => l.split(/ {3,}/)),
      [
        ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES', 'LAST RUN', 'TOOK', 'NEXT DUE', 'MISSED', 'STATE'],
        ['billing:hourly', 'web-1:4242', '3 min ago', 'in 47 min', 'ok 2 min ago', '4.1 s', '-', '0'],
        ['import:nightly', 'web-2:77', '3 h ago', 'expired 2 h ago', 'ok 3 h ago', '1 min 5 s', '-', '0', 'OVERDUE'],
        ['legacy', '-', '10 min ago', 'in 20 min', '-', '-', '-', '0'],
        ['report:daily', 'web-3', '6 min ago', 'expired 5 min ago', 'error 5 min ago', '850 ms', '-', '0', 'FAILING'],
        [
          'sync:failing-paused',
          'web-4',
          '6 min ago',
          'when resumed',
          'error 5 min ago',
          '850 ms',
          '-',
          '0',
          'FAILING PAUSED',
        ],
        ['sync:paused', 'web-4', '3 h ago', 'in 2 h', 'ok 3 h ago', '4.1 s', '-', '0', 'PAUSED'],
        ['unknown:outcome', 'web-5', '3 min ago', 'in 47 min', 'ran 2 min ago', 'under 1 ms', '-', '0'],
        [''],
        ['Pauses:'],
        ['  sync:failing-paused: paused until resumed: not overdue while paused'],
        [`  sync:paused: paused until ${paused.pausedUntil}: not overdue while paused`],
        [''],
        ['Last errors:'],
        ['  report:daily: Error: boom'],
        ['  sync:failing-paused: TypeError: no such row'],
        [''],
      ],
    )
    assert.doesNotMatch(run.stdout, SGR, 'no colour when stdout is not a terminal')
  })

  test('--json and --format json print exactly what listLeases returns, every field; an open-ended pause has remainingMs null', async () => {
    const table = await severalJobs()
    const run = await cli(['status', '--table', table, '--format', 'json'])
    assert.deepEqual([run.code, run.stderr], [0, ''])
    const printed: Record<string, unknown>[] = JSON.parse(run.stdout)
    const listed = await listLeases(pool, { table })
    assert.deepEqual(
      printed.map((l) => Object.keys(l)),
      listed.map((l) => Object.keys(l)),
    )
    // Everything but the clock-dependent fields is exactly what listLeases reports a moment later.
    const stable = ({ remainingMs, checkedAt, ...rest }: Record<string, unknown>) => ({
      ...rest,
      remainingMs: remainingMs === 0 ? 0 : remainingMs === null || remainingMs === Infinity ? 'open-ended' : 'held',
      checkedAt: typeof checkedAt,
    })
    assert.deepEqual(printed.map(stable), (listed as unknown as Record<string, unknown>[]).map(stable))
    assert.equal(new Set(printed.map((l) => l.checkedAt)).size, 1, 'one clock reading for every row')
    const held = printed.find((l) => l.jobName === 'billing:hourly')!
    assert.ok((held.remainingMs as number) > 0 && (held.remainingMs as number) <= 47.5 * 60_000, `${held.remainingMs}`)
    const paused = printed.find((l) => l.jobName === 'sync:failing-paused')!
    assert.deepEqual([paused.leaseUntil, paused.pausedUntil, paused.remainingMs], ['infinity', 'infinity', null])
    const failing = printed.find((l) => l.jobName === 'report:daily')!
    assert.deepEqual([failing.lastOutcome, failing.lastError, failing.lastDurationMs], ['error', 'Error: boom', 850])
    const short = await cli(['status', '--table', table, '--json'])
    assert.equal(short.code, 0, short.stderr)
    assert.deepEqual(JSON.parse(short.stdout).map(stable), printed.map(stable), '--json is --format json')
  })

  test('--overdue-factor moves the default grace: 3 h 20 min without a claim, every 1 h, is 2 h 20 min late: overdue at 2 and 100, not at 200', async () => {
    const table = await severalJobs()
    const overdue = async (...factor: string[]) => {
      const run = await cli(['status', '--table', table, '--json', ...factor])
      assert.equal(run.code, 0, run.stderr)
      return JSON.parse(run.stdout).find((l: LeaseInfo) => l.jobName === 'import:nightly').overdue
    }
    // The grace is (factor − 1) × the interval, at most a minute: 1 min, 99 min, 199 min.
    assert.deepEqual(
      [await overdue(), await overdue('--overdue-factor', '100'), await overdue('--overdue-factor', '200')],
      [true, true, false],
    )
    assert.deepEqual(await overdue('--overdue-factor', '200', '--grace', '2h'), true, '--grace wins over the factor')
  })
})

describe('check reads the real rows: exit 0 when every job is healthy and 3 when one is overdue or failing', () => {
  test('healthy jobs: one OK line and exit 0; an empty table has nothing to check', async () => {
    const table = await freshTable(pool, 'cli_check_ok')
    for (const job of ['a', 'b']) await withCronLease(pool, job, 60_000, () => {}, { table })
    const run = await cli(['check', '--table', table])
    assert.deepEqual([run.code, run.stderr], [0, ''])
    assert.match(run.stdout, new RegExp(`^OK: 2 jobs healthy in ${table} \\(database clock ${ISO_MICROS}\\)\\n$`))
    const empty = await freshTable(pool, 'cli_check_empty')
    const none = await cli(['check', '--table', empty])
    assert.deepEqual([none.code, none.stderr], [0, ''])
    assert.match(
      none.stdout,
      new RegExp(`^OK: no jobs in ${empty} yet, nothing to check \\(database clock ${ISO_MICROS}\\)\\n$`),
    )
  })

  test('one line per unhealthy job saying which and why; paused jobs are not overdue, but a failed run stays FAILING', async () => {
    const table = await severalJobs()
    const run = await cli(['check', '--table', table])
    assert.deepEqual([run.code, run.stderr], [3, ''])
    assert.deepEqual(run.stdout.split('\n'), [
      'import:nightly: OVERDUE: last claimed 3 h ago, every 1 h (grace 1 min)',
      'report:daily: FAILING: last run failed 5 min ago: Error: boom',
      'sync:failing-paused: FAILING: last run failed 5 min ago: TypeError: no such row; PAUSED until resumed, so it cannot run again until then',
      '',
    ])
    // sync:paused was claimed as long ago as import:nightly, with the same interval: only the pause keeps it healthy.
    assert.equal(run.stdout.includes('sync:paused'), false)
    // 2 h 20 min late: a factor of 200 (a grace of 199 min) makes it healthy.
    const looser = await cli(['check', '--table', table, '--overdue-factor', '200'])
    assert.deepEqual([looser.code, looser.stdout.includes('OVERDUE')], [3, false])
  })

  test('exit 1 when the table cannot be read or the database cannot be reached', async () => {
    assertFails(await cli(['check', '--table', 'no_such_leases']), 1, /the lease table no_such_leases does not exist/)
    const port = await freePort()
    assertFails(await cli(['check', '--url', `postgres://a:b@127.0.0.1:${port}/x`]), 1, /connection refused/)
  })
})

describe('doctor, end to end: exit 0 with warnings only, 3 with a failure, 1 when unreachable, 2 for usage', () => {
  test('the shipped bin: a table without its history warns (exit 0), a missing table fails (exit 3), progress on stderr only', async () => {
    const table = await freshTable(pool, 'cli_doctor')
    await pool.query(`DROP TABLE "${table}_runs"`)
    const warned = await cli(['doctor', '--table', table, '--race', '2', '--rounds', '3'])
    assert.equal(warned.code, 0, warned.stdout + warned.stderr)
    assert.match(
      warned.stdout,
      new RegExp(`^! table: ${table} has the current shape, but its history table ${table}_runs is missing`, 'm'),
    )
    assert.match(warned.stdout, /\n10 checks: 9 passed, 1 warnings, 0 failures\n$/)
    assert.match(warned.stderr, /^pg-cron-lease doctor: racing 2 connections for 3 rounds/m)
    const failed = await cli(['doctor', '--table', 'no_such_doctor_leases', '--format', 'json'])
    assert.equal(failed.code, 3)
    assert.equal(failed.stderr, '')
    const checks = JSON.parse(failed.stdout) as { id: string; status: string; fix: string | null }[]
    assert.deepEqual(
      checks.filter((c) => c.status === 'fail').map((c) => c.id),
      ['table', 'race'],
    )
    assert.match(checks[2]!.fix ?? '', /pg-cron-lease migrate --table no_such_doctor_leases/)
  })

  test('an unreachable database is one line and exit 1; a bad flag is exit 2 before connecting', async () => {
    const port = await freePort()
    assertFails(await cli(['doctor', '--url', `postgres://a:s3cret@127.0.0.1:${port}/x`]), 1, /connection refused/)
    assertFails(await cli(['doctor', '--race', '1']), 2, /--race must be a whole number from 2 to 100, got 1/)
  })
})

describe('a job whose next due time passed unclaimed, on real rows', () => {
  test('check exits 3 and says since when it is due, apart from a job overdue by its interval; --grace moves the line', async () => {
    const { table, missedAtClaim } = await occurrenceJobs()
    assert.equal(missedAtClaim, 2, 'the claim 15 min after the one before counted the 2 occurrences between them')
    const run = await cli(['check', '--table', table])
    assert.deepEqual([run.code, run.stderr], [3, ''])
    const late = (await listLeases(pool, { table })).find((l) => l.jobName === 'report:5min')!
    assert.match(late.nextDueAt ?? '', new RegExp(`^${ISO_MICROS}$`))
    assert.deepEqual(run.stdout.split('\n'), [
      'import:nightly: OVERDUE: last claimed 3 h ago, every 1 h (grace 1 min)',
      `report:5min: OVERDUE: due ${late.nextDueAt}, not claimed for 4 min (grace 1 min)`,
      '',
    ])
    const json = await cli(['check', '--table', table, '--json', '--job', 'report:5min'])
    assert.equal(json.code, 3, json.stderr)
    assert.deepEqual(JSON.parse(json.stdout).jobs[0], {
      jobName: 'report:5min',
      healthy: false,
      neverClaimed: false,
      overdue: true,
      failing: false,
      died: false,
      paused: false,
      reason: `OVERDUE: due ${late.nextDueAt}, not claimed for 4 min (grace 1 min)`,
    })
    const tighter = await cli(['check', '--table', table, '--job', 'report:5min', '--grace', '4m'])
    assert.deepEqual(
      [tighter.code, tighter.stdout],
      [3, `report:5min: OVERDUE: due ${late.nextDueAt}, not claimed for 4 min (grace 4 min)\n`],
    )
    const looser = await cli(['check', '--table', table, '--job', 'report:5min', '--grace', '5m'])
    assert.deepEqual([looser.code, looser.stderr], [0, ''])
    assert.match(looser.stdout, /^OK: 1 job healthy in /)
    assert.equal((await cli(['check', '--table', table, '--job', 'billing:hourly'])).code, 0, 'due ahead: healthy')
  })

  test('status shows NEXT DUE and MISSED, the JSON fields as listLeases returns them, and the two Prometheus families', async () => {
    const { table } = await occurrenceJobs()
    const text = await cli(['status', '--table', table])
    assert.deepEqual([text.code, text.stderr], [0, ''])
    assert.deepEqual(
      text.stdout
        .split('\n')
        .slice(2, 6)
        .map((l) => l.split(/ {3,}/))
        .map((cells) => [cells[0], ...cells.slice(6)]),
      [
        ['JOB', 'NEXT DUE', 'MISSED', 'STATE'],
        ['billing:hourly', 'in 59 min', '0'],
        ['import:nightly', '-', '0', 'OVERDUE'],
        ['report:5min', 'due 4 min ago', '2', 'OVERDUE'],
      ],
    )

    const json = await cli(['status', '--table', table, '--json'])
    assert.deepEqual([json.code, json.stderr], [0, ''])
    const fields = (l: Record<string, unknown>) => ({
      jobName: l.jobName,
      lastOccurrence: l.lastOccurrence,
      nextDueAt: l.nextDueAt,
      missed: l.missed,
      overdue: l.overdue,
    })
    const listed = (await listLeases(pool, { table })) as unknown as Record<string, unknown>[]
    assert.deepEqual(JSON.parse(json.stdout).map(fields), listed.map(fields), 'nothing claimed in between: the same')
    const report = listed.find((l) => l.jobName === 'report:5min')!
    assert.deepEqual([report.missed, report.overdue], [2, true])
    assert.equal(typeof report.lastOccurrence, 'string')
    const graced = await cli(['status', '--table', table, '--json', '--grace', '5m'])
    assert.equal(JSON.parse(graced.stdout).find((l: LeaseInfo) => l.jobName === 'report:5min').overdue, false)

    const metrics = await cli(['status', '--table', table, '--format', 'prometheus'])
    assert.deepEqual([metrics.code, metrics.stderr], [0, ''])
    const families = parseExposition(metrics.stdout)
    const sampled = (name: string) =>
      Object.fromEntries(families.get(name)!.samples.map((s) => [s.labels.job_name!, s.value]))
    assert.equal(families.get('pg_cron_lease_missed_occurrences_total')?.type, 'counter')
    assert.deepEqual(sampled('pg_cron_lease_missed_occurrences_total'), {
      'billing:hourly': 0,
      'import:nightly': 0,
      'report:5min': 2,
    })
    const dueIn = sampled('pg_cron_lease_next_due_in_seconds')
    assert.deepEqual(Object.keys(dueIn), ['billing:hourly', 'report:5min'], 'no sample without a next due time')
    assert.ok(dueIn['billing:hourly']! > 3500 && dueIn['billing:hourly']! <= 3570, `${dueIn['billing:hourly']}`)
    assert.ok(dueIn['report:5min']! < -270 && dueIn['report:5min']! > -300, `${dueIn['report:5min']}`)
  })
})

describe('pause, resume and release act on one job, by the database clock, for every replica', () => {
  /** A table with two claimable jobs, and the row of the one the test must not touch. */
  async function twoJobs(prefix: string) {
    const table = await freshTable(pool, prefix)
    for (const job of ['billing:hourly', 'bystander']) {
      await withCronLease(pool, job, 60_000, () => {}, { table, holder: 'web-1' })
      await expireLease(pool, table, job)
    }
    const bystander = async () => (await pool.query(`SELECT * FROM "${table}" WHERE job_name = 'bystander'`)).rows
    return { table, bystander, before: await bystander() }
  }

  test('pause --for: no replica can claim the job until resume, and the other job is untouched', async () => {
    const { table, bystander, before } = await twoJobs('cli_pause')
    const run = await cli(['pause', 'billing:hourly', '--for', '2h', '--table', table])
    assert.deepEqual([run.code, run.stderr], [0, ''])
    const said = new RegExp(
      `^Paused billing:hourly until (${ISO_MICROS}) \\(database clock (${ISO_MICROS})\\); no replica can claim it until then\\.\\n$`,
    ).exec(run.stdout)
    assert.ok(said, run.stdout)
    assert.equal(micros(said[1]!) - micros(said[2]!), 2n * 3600n * 1_000_000n, 'two hours by the database clock')
    assert.equal(await replicaWins(table, 'billing:hourly'), false, 'a paused job cannot be claimed')

    const resumed = await cli(['resume', 'billing:hourly', '--table', table])
    assert.deepEqual([resumed.code, resumed.stderr], [0, ''])
    assert.match(
      resumed.stdout,
      new RegExp(
        `^Resumed billing:hourly \\(database clock ${ISO_MICROS}\\); it is not paused, and the next claim on any replica runs it\\.\\n$`,
      ),
    )
    assert.equal(await replicaWins(table, 'billing:hourly'), true, 'after resume the next claim wins')
    assert.deepEqual(await bystander(), before, 'the other job is untouched')
  })

  test('pause without an end holds until resume; --until takes a zone and a new pause replaces the old one', async () => {
    const { table, bystander, before } = await twoJobs('cli_pause_open')
    const open = await cli(['pause', 'billing:hourly', '--table', table])
    assert.equal(open.code, 0, open.stderr)
    assert.match(
      open.stdout,
      new RegExp(
        `^Paused billing:hourly until resumed \\(database clock ${ISO_MICROS}\\); no replica can claim it until pg-cron-lease resume\\.\\n$`,
      ),
    )
    const [lease] = (await listLeases(pool, { table })).filter((l) => l.jobName === 'billing:hourly')
    assert.deepEqual([lease!.paused, lease!.pausedUntil, lease!.leaseUntil], [true, 'infinity', 'infinity'])
    assert.equal(await replicaWins(table, 'billing:hourly'), false)

    // Tomorrow at this time of the database clock, written in a +02:00 zone.
    const { rows } = await pool.query(
      `SELECT to_char((clock_timestamp() + interval '1 day') AT TIME ZONE '+02:00'::interval, 'YYYY-MM-DD"T"HH24:MI:SS"+02:00"') AS local,
              to_char(date_trunc('second', clock_timestamp() + interval '1 day') AT TIME ZONE INTERVAL '+00:00', 'YYYY-MM-DD"T"HH24:MI:SS".000000Z"') AS utc`,
    )
    const until = await cli(['pause', 'billing:hourly', '--until', rows[0].local, '--table', table])
    assert.equal(until.code, 0, until.stderr)
    assert.match(
      until.stdout,
      new RegExp(
        `^Paused billing:hourly until ${rows[0].utc.replace(/\./g, '\\.')} \\(database clock ${ISO_MICROS}\\); no replica can claim it until then\\.\\n$`,
      ),
    )
    const [after] = (await listLeases(pool, { table })).filter((l) => l.jobName === 'billing:hourly')
    assert.deepEqual(
      [after!.pausedUntil, after!.leaseUntil],
      [rows[0].utc, rows[0].utc],
      'the lease ends with the new pause',
    )
    assert.equal(await replicaWins(table, 'billing:hourly'), false)
    assert.deepEqual(await bystander(), before)
  })

  test('a shorter pause given over an open-ended one ends when it says: the next claim after it wins', async () => {
    const { table } = await twoJobs('cli_pause_shorter')
    assert.equal((await cli(['pause', 'billing:hourly', '--table', table])).code, 0)
    const short = await cli(['pause', 'billing:hourly', '--for', '1s', '--table', table])
    assert.equal(short.code, 0, short.stderr)
    const [lease] = (await listLeases(pool, { table })).filter((l) => l.jobName === 'billing:hourly')
    assert.notEqual(lease!.leaseUntil, 'infinity', 'the open-ended lease of the first pause is replaced')
    const deadline = Date.now() + 15_000
    let won = false
    while (!won && Date.now() < deadline) {
      won = await replicaWins(table, 'billing:hourly')
      if (!won) await new Promise((resolve) => setTimeout(resolve, 200))
    }
    assert.equal(won, true, 'claimable once the one-second pause is over')
  })

  test('release ends a held lease so the next claim wins; on a paused job the pause stays', async () => {
    const { table, bystander, before } = await twoJobs('cli_release')
    await withCronLease(pool, 'import:nightly', 3_600_000, () => {}, { table, holder: 'crashed' })
    assert.equal(await replicaWins(table, 'import:nightly'), false, 'held for an hour')
    const run = await cli(['release', 'import:nightly', '--table', table])
    assert.deepEqual([run.code, run.stderr], [0, ''])
    assert.match(
      run.stdout,
      new RegExp(
        `^Released the lease of import:nightly \\(database clock ${ISO_MICROS}\\); the next claim on any replica runs it\\.\\n$`,
      ),
    )
    assert.equal(await replicaWins(table, 'import:nightly'), true, 'released: the next claim wins')

    assert.equal((await cli(['pause', 'billing:hourly', '--for', '1h', '--table', table])).code, 0)
    const paused = await cli(['release', 'billing:hourly', '--table', table])
    assert.equal(paused.code, 0, paused.stderr)
    assert.match(
      paused.stdout,
      new RegExp(
        `^Released the lease of billing:hourly \\(database clock ${ISO_MICROS}\\); it is still paused until ${ISO_MICROS}, so no replica can claim it before then\\.\\n$`,
      ),
    )
    assert.equal(await replicaWins(table, 'billing:hourly'), false, 'release does not lift a pause')
    assert.deepEqual(await bystander(), before)
  })

  test('a job with no row exits 1 and says so, changing nothing', async () => {
    const { table, bystander, before } = await twoJobs('cli_no_row')
    for (const command of ['pause', 'resume', 'release']) {
      const run = await cli([command, 'billing:hourlly', '--table', table])
      assertFails(
        run,
        1,
        new RegExp(
          `^pg-cron-lease: no job "billing:hourlly" in ${table} at [^ ]+: it has never been claimed, or the name has a typo; nothing was changed\\n$`,
        ),
      )
      assert.doesNotMatch(run.stderr, /bystander/, 'lists nothing else')
    }
    // After --, a name that looks like an option is a name.
    assertFails(await cli(['release', '--table', table, '--', '--help']), 1, /^pg-cron-lease: no job "--help" in /)
    const { rows } = await pool.query(`SELECT job_name FROM "${table}" ORDER BY job_name`)
    assert.deepEqual(
      rows.map((r) => r.job_name),
      ['billing:hourly', 'bystander'],
      'no row created',
    )
    assert.deepEqual(await bystander(), before)
  })

  test('--until not in the future by the database clock is refused by the library: a usage error naming --until that changes nothing', async () => {
    const { table } = await twoJobs('cli_past')
    const before = await pool.query(`SELECT * FROM "${table}" ORDER BY job_name`)
    const { rows } = await pool.query(
      `SELECT to_char(clock_timestamp() AT TIME ZONE INTERVAL '+00:00' - interval '1 second', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS just_past`,
    )
    for (const until of ['2001-01-01T00:00:00Z', rows[0].just_past]) {
      const run = await cli(['pause', 'billing:hourly', '--until', until, '--table', table])
      assertFails(run, 2, /^pg-cron-lease: --until .*in the future by the database clock/)
      assert.match(run.stderr, /nothing was changed/)
      assert.doesNotMatch(run.stderr, /opts\.until/, 'the flag is named as the command line spells it')
    }
    assert.deepEqual((await pool.query(`SELECT * FROM "${table}" ORDER BY job_name`)).rows, before.rows)
  })

  test('a --for that ends after the year 9999 pauses until resumed, and release and resume then print readable times', async () => {
    const { table } = await twoJobs('cli_range')
    const run = await cli(['pause', 'billing:hourly', '--for', '104249991d', '--table', table])
    assert.deepEqual([run.code, run.stderr], [0, ''])
    assert.match(
      run.stdout,
      new RegExp(
        `^Paused billing:hourly until resumed \\(database clock ${ISO_MICROS}\\)[:;] .*pg-cron-lease resume\\.\\n$`,
      ),
    )
    assertReadableTimes(run.stdout)
    assert.equal(await replicaWins(table, 'billing:hourly'), false, 'paused')
    const released = await cli(['release', 'billing:hourly', '--table', table])
    assert.equal(released.code, 0, released.stderr)
    assert.match(released.stdout, /it is still paused until resumed, so no replica can claim it before then\.\n$/)
    assertReadableTimes(released.stdout)
    const resumed = await cli(['resume', 'billing:hourly', '--table', table])
    assert.equal(resumed.code, 0, resumed.stderr)
    assertReadableTimes(resumed.stdout)
    assert.equal(await replicaWins(table, 'billing:hourly'), true, 'resumed')
  })

  test('resume on a job that is not paused says so and changes nothing (exit 0); on a paused job it resumes', async () => {
    const { table, bystander, before } = await twoJobs('cli_not_paused')
    const row = async () => (await pool.query(`SELECT * FROM "${table}" WHERE job_name = 'billing:hourly'`)).rows
    const unpaused = await row()
    const notPaused = new RegExp(
      `^Nothing to resume: billing:hourly was not paused \\(database clock ${ISO_MICROS}\\); nothing changed\\.\\n$`,
    )
    const never = await cli(['resume', 'billing:hourly', '--table', table])
    assert.deepEqual([never.code, never.stderr], [0, ''])
    assert.match(never.stdout, notPaused)
    assert.deepEqual(await row(), unpaused, 'the row is as it was')

    assert.equal((await cli(['pause', 'billing:hourly', '--for', '1s', '--table', table])).code, 0)
    await new Promise((resolve) => setTimeout(resolve, 1500))
    const ranOut = await cli(['resume', 'billing:hourly', '--table', table])
    assert.deepEqual([ranOut.code, ranOut.stderr], [0, ''])
    assert.match(ranOut.stdout, notPaused, 'a pause that ran out is not a pause')

    assert.equal((await cli(['pause', 'billing:hourly', '--table', table])).code, 0)
    const paused = await cli(['resume', 'billing:hourly', '--table', table])
    assert.deepEqual([paused.code, paused.stderr], [0, ''])
    assert.match(paused.stdout, /^Resumed billing:hourly /)
    assert.deepEqual(await bystander(), before)
  })

  test('on a table of the original shape pause and resume say to run migrate (exit 1); release, status and check work', async () => {
    const table = await oldShapeTable()
    await withCronLease(pool, 'old', 3_600_000, () => {}, { table, holder: 'h', record: false })
    await setTimes(table, 'old', '3 min 10 s', '47 min 30 s')
    const status = await cli(['status', '--table', table])
    assert.deepEqual([status.code, status.stderr], [0, ''])
    assert.deepEqual(
      status.stdout
        .split('\n')
        .slice(3, 4)
        .map((l) => l.split(/ {3,}/)),
      [['old', 'h', '3 min ago', 'in 47 min', '-', '-', '-', '0']],
      'the run and occurrence columns are empty and no job is marked',
    )
    for (const args of [
      ['pause', 'old'],
      ['pause', 'old', '--for', '1h'],
      ['resume', 'old'],
    ]) {
      // Whether the driver or the library finds the columns missing, the line names the table and
      // the command that adds them.
      const run = await cli([...args, '--table', table])
      assertFails(run, 1, new RegExp(`^pg-cron-lease: .*\\b${table}\\b.*(without the pause columns|lacks)`))
      assert.match(run.stderr, new RegExp(`pg-cron-lease migrate --table ${table}\\b`))
    }
    const released = await cli(['release', 'old', '--table', table])
    assert.equal(released.code, 0, released.stderr)
    assert.match(released.stdout, /^Released the lease of old /)
    assert.equal(await replicaWins(table, 'old'), true)
    const checked = await cli(['check', '--table', table])
    assert.equal(checked.code, 0, 'check reads a table of the original shape; nothing is known to be wrong')
  })

  test('an unreachable database is exit 1', async () => {
    const port = await freePort()
    for (const command of ['pause', 'resume', 'release']) {
      assertFails(await cli([command, 'a', '--url', `postgres://a:b@127.0.0.1:${port}/x`]), 1, /connection refused/)
    }
  })
})

describe('a due time that passed unclaimed is overdue, whenever it was stored', () => {
  test('a replica an hour late for a per-minute job stores a due time already past: listLeases and check say overdue', async () => {
    const table = await freshTable(pool, 'cli_past_due')
    const now = Date.now()
    const slot = Math.floor(now / 60_000) * 60_000 - 60 * 60_000
    await withCronLease(pool, 'minutely', 50_000, () => {}, {
      table,
      occurrence: new Date(slot),
      nextOccurrence: new Date(slot + 60_000),
    })
    const [lease] = await listLeases(pool, { table })
    assert.ok(lease?.nextDueAt !== null && Date.parse(lease!.nextDueAt!) < now, 'the due time stored is past')
    assert.equal(lease?.overdue, true)
    const run = await cli(['check', '--table', table])
    assert.equal(run.code, 3, run.stdout)
    assert.match(run.stdout, /^minutely: OVERDUE: due .*, not claimed for 59 min/)
  })

  test('a claim that names no occurrence leaves no due time behind: the job is then judged by its interval', async () => {
    const table = await freshTable(pool, 'cli_no_stale_due')
    const slot = Math.floor(Date.now() / 60_000) * 60_000
    await withCronLease(pool, 'job', 1, () => {}, {
      table,
      occurrence: new Date(slot - 120_000),
      nextOccurrence: new Date(slot - 60_000),
    })
    await new Promise((resolve) => setTimeout(resolve, 5))
    await withCronLease(pool, 'job', 60_000, () => {}, { table })
    const [lease] = await listLeases(pool, { table })
    assert.deepEqual([lease?.nextDueAt, lease?.overdue], [null, false])
  })

  test('--overdue-factor and overdueFactor move the default grace of a job with a due time too', async () => {
    const table = await freshTable(pool, 'cli_factor_due')
    const slot = Math.floor(Date.now() / 60_000) * 60_000 - 5 * 60_000
    await withCronLease(pool, 'five-late', 50_000, () => {}, {
      table,
      occurrence: new Date(slot - 60_000),
      nextOccurrence: new Date(slot),
    })
    // About 5 min past its due time, every minute: the grace is (factor − 1) min.
    const overdue = async (overdueFactor: number) => (await listLeases(pool, { table, overdueFactor }))[0]?.overdue
    assert.deepEqual(
      [await overdue(2), await overdue(4), await overdue(10), await overdue(100)],
      [true, true, false, false],
    )
    assert.equal((await cli(['check', '--table', table])).code, 3)
    const lenient = await cli(['check', '--table', table, '--overdue-factor', '100'])
    assert.equal(lenient.code, 0, lenient.stdout)
  })
})
