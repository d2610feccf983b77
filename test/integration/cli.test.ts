/**
 * The pg-cron-lease bin, run as a child process against the test database. It is built from
 * tsdown.config.ts into a temporary directory laid out like an installed package (package.json,
 * dist/cli.mjs, node_modules), so what runs is the file the package ships, not the TS source.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { build, type UserConfig } from 'tsdown'
import { expireLease, freePort, freshTable, testDatabaseUrl, testPool } from '../../dev/postgres.ts'
import { createTableSql, type LeaseInfo, listLeases, pauseJob, withCronLease } from '../../src/index.ts'
import config from '../../tsdown.config.ts'
import { finished } from '../helpers/child.ts'
import { type Family, parseExposition } from '../helpers/prometheus.ts'

/** An ANSI SGR sequence (colour on or off) with the given code, or any code. */
const sgr = (code = '\\d+') => new RegExp(`${String.fromCharCode(27)}\\[${code}m`, 'g')

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const PACKAGE = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'))
const BIN_PATH: string = PACKAGE.bin['pg-cron-lease']

let pool: pg.Pool
/** Another replica's pool: what the admin commands must reach. */
let replica: pg.Pool
let url: string
/** A directory laid out like an installed package: package.json, dist/cli.mjs, node_modules. */
let installed: string
/** The same bin with no node_modules next to it: `pg` cannot be found. */
let bare: string

before(async () => {
  url = await testDatabaseUrl()
  pool = await testPool()
  replica = await testPool()
  const cli = (config as UserConfig[]).find((c) => typeof c.entry === 'object' && 'cli' in (c.entry as object))
  assert.ok(cli, 'tsdown.config.ts has a cli entry')
  installed = mkdtempSync(path.join(os.tmpdir(), 'pgcl-cli-'))
  await build({ ...cli, config: false, cwd: ROOT, outDir: path.join(installed, 'dist'), logLevel: 'error' })
  copyFileSync(path.join(ROOT, 'package.json'), path.join(installed, 'package.json'))
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(installed, 'node_modules'), 'dir')
  bare = mkdtempSync(path.join(os.tmpdir(), 'pgcl-cli-bare-'))
  mkdirSync(path.join(bare, 'dist'))
  copyFileSync(path.join(installed, BIN_PATH), path.join(bare, BIN_PATH))
})

after(async () => {
  await pool?.end()
  await replica?.end()
  for (const dir of [installed, bare]) if (dir) rmSync(dir, { recursive: true, force: true })
})

interface Run {
  code: number | null
  stdout: string
  stderr: string
}

/**
 * Runs the bin with a clean colour environment and DATABASE_URL set to the test database, unless
 * `env` says otherwise (a value of undefined removes the variable).
 */
async function cli(args: string[], env: Record<string, string | undefined> = {}, dir = installed): Promise<Run> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: url }
  for (const key of ['NO_COLOR', 'FORCE_COLOR', 'NODE_OPTIONS']) delete childEnv[key]
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[key]
    else childEnv[key] = value
  }
  const { code, stdout, stderr } = await finished(
    spawn(process.execPath, [path.join(dir, BIN_PATH), ...args], { env: childEnv }),
  )
  return { code, stdout, stderr }
}

/** A failure: the exit code, nothing on stdout, and exactly one line on stderr without a stack. */
function assertFails(run: Run, code: 1 | 2, message: RegExp) {
  assert.equal(run.code, code, `exit code (stdout: ${run.stdout}, stderr: ${run.stderr})`)
  assert.equal(run.stdout, '')
  assert.match(run.stderr, /^pg-cron-lease: [^\n]+\n$/, 'one line on stderr')
  assert.doesNotMatch(run.stderr, /\bat .*:\d+:\d+/, 'no stack trace')
  assert.match(run.stderr, message)
}

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

/** Sets a lease's claim and expiry relative to the database clock. */
async function setTimes(table: string, jobName: string, claimedAgo: string, until: string) {
  await pool.query(
    `UPDATE "${table}" SET claimed_at = clock_timestamp() - $2::interval, lease_until = clock_timestamp() + $3::interval
     WHERE job_name = $1`,
    [jobName, claimedAgo, until],
  )
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
 * - import:nightly       claimed 3 h 20 min ago, every 1 h: OVERDUE (factor 2 and 3, not 4)
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

/** A lease table of the original shape: the four columns of 2.0, none for outcomes or pauses. */
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
    const file = path.join(installed, BIN_PATH)
    assert.match(readFileSync(file, 'utf8'), /^#!\/usr\/bin\/env node\n/)
    chmodSync(file, 0o755)
    const run = await finished(spawn(file, ['sql'], { env: { ...process.env, NO_COLOR: '1' } }))
    assert.deepEqual([run.code, run.stdout], [0, createTableSql()])
  })

  test('--version prints the package version', async () => {
    assert.deepEqual(await cli(['--version']), { code: 0, stdout: `${PACKAGE.version}\n`, stderr: '' })
  })
})

describe('help', () => {
  test('--help lists every command and exits 0; with no command the same text goes to stderr with exit 2', async () => {
    const help = await cli(['--help'])
    assert.equal(help.code, 0)
    for (const word of ['sql', 'migrate', 'status', 'check', 'pause', 'resume', 'release', '--table', '--url']) {
      assert.ok(help.stdout.includes(word), `help mentions ${word}`)
    }
    for (const word of ['DATABASE_URL', 'NO_COLOR']) assert.ok(help.stdout.includes(word), `help mentions ${word}`)
    assert.match(
      help.stdout,
      /^Exit codes: 0 success, 1 database error, 2 usage error, 3 check found an unhealthy job\.$/m,
      'the exit-code line names all four codes',
    )
    assert.deepEqual(await cli([]), { code: 2, stdout: '', stderr: help.stdout })
    assert.deepEqual(await cli(['help']), help)
  })

  test('each command has its own --help naming only its options and its exit codes, even next to a bad option', async () => {
    const all = ['--table', '--url', '--json', '--format', '--overdue-factor', '--job', '--for', '--until']
    for (const [command, has, exits] of [
      ['sql', ['--table'], ['0', '2']],
      ['migrate', ['--table', '--url'], ['0', '1', '2']],
      ['status', ['--table', '--url', '--json', '--format', '--overdue-factor'], ['0', '1', '2']],
      ['check', ['--table', '--url', '--json', '--overdue-factor', '--job'], ['0', '1', '2', '3']],
      ['pause', ['--table', '--url', '--for', '--until'], ['0', '1', '2']],
      ['resume', ['--table', '--url'], ['0', '1', '2']],
      ['release', ['--table', '--url'], ['0', '1', '2']],
    ] as const) {
      const run = await cli([command, '--help'])
      assert.equal(run.code, 0)
      assert.match(run.stdout, new RegExp(`^Usage: pg-cron-lease ${command}`))
      const options = run.stdout.slice(run.stdout.indexOf('\nOptions:\n'))
      for (const o of all) {
        const listed = new RegExp(`^  ${o}\\b`, 'm').test(options)
        assert.equal(listed, (has as readonly string[]).includes(o), `${command} --help lists ${o}: ${!listed}`)
      }
      const codes = /^Exit codes: (.*)$/m.exec(run.stdout)?.[1] ?? ''
      assert.deepEqual(
        [...codes.matchAll(/(?:^|, )(\d) /g)].map((m) => m[1]).sort(),
        exits,
        `${command} --help: ${codes}`,
      )
      assert.deepEqual(await cli([command, '--bogus', '-h']), run)
      assert.deepEqual(await cli(['help', command]), run)
    }
  })

  test('the help of status and check states the JSON fields, the Prometheus format and the choices for paused and unnamed jobs', async () => {
    const status = (await cli(['status', '--help'])).stdout
    for (const field of [
      'lastOutcome',
      'lastDurationMs',
      'lastError',
      'lastSuccessAt',
      'everyMs',
      'overdue',
      'pausedUntil',
    ]) {
      assert.ok(status.includes(field), `status --help names ${field}`)
    }
    assert.match(status, /remainingMs is null/)
    assert.match(status, /# EOF/)
    const check = (await cli(['check', '--help'])).stdout
    assert.match(check, /paused job is never overdue, but a paused job whose last run failed is still FAILING/)
    assert.match(check, /NEVER CLAIMED/)
  })
})

describe('usage errors exit 2 with one line that says what to do', () => {
  test('unknown commands and options, missing or stray values, and a bad --table', async () => {
    for (const [args, message] of [
      [
        ['frob'],
        /unknown command "frob": expected sql, migrate, status, check, pause, resume, release; see pg-cron-lease --help/,
      ],
      [['--frob'], /expected a command .* before --frob/],
      [['status', '--bogus'], /unknown option --bogus for status; see pg-cron-lease status --help/],
      [['sql', '--url', url], /unknown option --url for sql/],
      [['status', '--table'], /--table needs a value/],
      [['status', '--json=yes'], /--json takes no value/],
      [['status', 'extra'], /unexpected argument "extra"/],
      [
        ['status', '--table', 'x; DROP TABLE y'],
        /--table must be an identifier or schema\.identifier.*got "x; DROP TABLE y"/,
      ],
      [['sql', '--table', 'a.b.c'], /--table must be/],
    ] as const) {
      assertFails(await cli([...args]), 2, message)
    }
  })

  test('no database given, or a --url that is not a postgres URL; the URL is never echoed with its password', async () => {
    assertFails(
      await cli(['status'], { DATABASE_URL: undefined }),
      2,
      /no database to connect to: pass --url .* or set DATABASE_URL/,
    )
    assertFails(await cli(['migrate'], { DATABASE_URL: '' }), 2, /no database to connect to/)
    assertFails(await cli(['status', '--url', 'not a url']), 2, /--url is not a URL; expected postgres:\/\//)
    const run = await cli(['status'], { DATABASE_URL: 'mysql://root:secret@host/db' })
    assertFails(run, 2, /DATABASE_URL must start with postgres:\/\/ or postgresql:\/\//)
    assert.ok(!run.stderr.includes('secret'))
  })

  test('a URL refused for its form is echoed exactly as typed, with every password in it masked', async () => {
    for (const [source, typed, shown] of [
      ['DATABASE_URL', 'localhost:54329', 'localhost:54329'],
      ['DATABASE_URL', 'db.internal:5432/app', 'db.internal:5432/app'],
      ['DATABASE_URL', 'mysql://root:secret@host/db', 'mysql://root:***@host/db'],
      ['--url', 'u:secret@localhost:5432/db', 'u:***@localhost:5432/db'],
      ['--url', 'mysql://host/db?sslmode=off&password=secret&x=1', 'mysql://host/db?sslmode=off&password=***&x=1'],
      ['--url', 'host=localhost password=secret dbname=app', 'host=localhost password=*** dbname=app'],
      ['--url', "host=localhost password='sec ret' dbname=app", 'host=localhost password=*** dbname=app'],
      ['--url', 'mysql://u:sec@ret/x@localhost/db', 'mysql://u:***@localhost/db'],
    ] as const) {
      const run = await cli(
        ['status', ...(source === '--url' ? ['--url', typed] : [])],
        source === 'DATABASE_URL' ? { DATABASE_URL: typed } : {},
      )
      assertFails(run, 2, new RegExp(`^pg-cron-lease: ${source} (must start with|is not a URL)`))
      assert.ok(run.stderr.endsWith(`, got ${JSON.stringify(shown)}\n`), run.stderr)
      assert.doesNotMatch(run.stderr, /secret|sec ret|sec@ret/, 'the password is masked')
    }
  })

  test('a malformed percent-encoding in --url or DATABASE_URL says which and where, and never echoes the URL', async () => {
    const port = await freePort()
    for (const [bad, part] of [
      [`postgres://u:%zz@127.0.0.1:${port}/db`, 'password'],
      [`postgres://u:%e9secret@127.0.0.1:${port}/db`, 'password'],
      [`postgres://u%zz:secret@127.0.0.1:${port}/db`, 'user name'],
      [`postgres://u:secret@127.0.0.1:${port}/d%zz`, 'database name'],
    ] as const) {
      const viaFlag = await cli(['status', '--url', bad])
      assertFails(viaFlag, 2, new RegExp(`--url has a malformed percent-encoding in its ${part}`))
      const viaEnv = await cli(['migrate'], { DATABASE_URL: bad })
      assertFails(viaEnv, 2, new RegExp(`DATABASE_URL has a malformed percent-encoding in its ${part}`))
      for (const { stderr } of [viaFlag, viaEnv]) {
        assert.ok(!/secret|%zz|%e9/.test(stderr), `the URL is not echoed: ${stderr}`)
      }
    }
  })
})

describe('sql prints the DDL without a database', () => {
  test('the default table and a schema-qualified one, byte for byte what createTableSql returns', async () => {
    assert.deepEqual(await cli(['sql'], { DATABASE_URL: undefined }), { code: 0, stdout: createTableSql(), stderr: '' })
    assert.deepEqual(await cli(['sql', '--table', 'jobs.leases']), {
      code: 0,
      stdout: createTableSql('jobs.leases'),
      stderr: '',
    })
  })
})

describe('migrate creates the table, and running it again changes nothing', () => {
  test('first run creates, second run says it exists; both exit 0 and claims then work', async () => {
    const table = `cli_migrate_${process.pid}`
    await pool.query(`DROP TABLE IF EXISTS "${table}"`)
    const target = `${new URL(url).hostname}:${new URL(url).port}/${new URL(url).pathname.slice(1)}`
    assert.deepEqual(await cli(['migrate', '--table', table]), {
      code: 0,
      stdout: `Created table ${table} in ${target}.\n`,
      stderr: '',
    })
    assert.deepEqual(await cli(['migrate', '--table', table]), {
      code: 0,
      stdout: `Table ${table} already exists in ${target} and is up to date; nothing to do.\n`,
      stderr: '',
    })
    const { ran } = await withCronLease(pool, 'after-migrate', 60_000, () => {}, { table })
    assert.equal(ran, true)
    await pool.query(`DROP TABLE "${table}"`)
  })

  test('a schema that does not exist is a database error that says to create it', async () => {
    assertFails(
      await cli(['migrate', '--table', 'no_such_schema.leases']),
      1,
      /schema "no_such_schema" does not exist, so no_such_schema\.leases cannot be created; create the schema first/,
    )
  })
})

describe('status shows who holds each lease, by the database clock', () => {
  test('a readable table: holder, claim, expiry, last run, its duration and a FAILING / OVERDUE / PAUSED marker', async () => {
    const table = await severalJobs()
    const run = await cli(['status', '--table', table])
    assert.equal(run.code, 0, run.stderr)
    assert.equal(run.stderr, '')
    const lines = run.stdout.split('\n')
    assert.match(
      lines[0]!,
      new RegExp(`^${table}: 7 jobs, 5 held, 2 failing, 1 overdue, 2 paused \\(database clock ${ISO_MICROS}\\)$`),
    )
    assert.equal(lines[1], '')
    assert.deepEqual(
      lines.slice(2).map((l) => l.split(/ {3,}/)),
      [
        ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES', 'LAST RUN', 'TOOK', 'STATE'],
        ['billing:hourly', 'web-1:4242', '3 min ago', 'in 47 min', 'ok 2 min ago', '4.1 s'],
        ['import:nightly', 'web-2:77', '3 h ago', 'expired 2 h ago', 'ok 3 h ago', '1 min 5 s', 'OVERDUE'],
        ['legacy', '-', '10 min ago', 'in 20 min', '-', '-'],
        ['report:daily', 'web-3', '6 min ago', 'expired 5 min ago', 'error 5 min ago', '850 ms', 'FAILING'],
        ['sync:failing-paused', 'web-4', '6 min ago', 'when resumed', 'error 5 min ago', '850 ms', 'FAILING PAUSED'],
        ['sync:paused', 'web-4', '3 h ago', 'in 2 h', 'ok 3 h ago', '4.1 s', 'PAUSED'],
        ['unknown:outcome', 'web-5', '3 min ago', 'in 47 min', 'ran 2 min ago', 'under 1 ms'],
        [''],
        ['Last errors:'],
        ['  report:daily: Error: boom'],
        ['  sync:failing-paused: TypeError: no such row'],
        [''],
      ],
    )
    assert.doesNotMatch(run.stdout, sgr(), 'no colour when stdout is not a terminal')
  })

  test('on a table of the original shape the run columns are empty and no job is marked', async () => {
    const table = await oldShapeTable()
    await withCronLease(pool, 'old', 60_000, () => {}, { table, holder: 'h', record: false })
    await setTimes(table, 'old', '3 min 10 s', '47 min 30 s')
    const run = await cli(['status', '--table', table])
    assert.equal(run.code, 0, run.stderr)
    assert.deepEqual(
      run.stdout
        .split('\n')
        .slice(3, 4)
        .map((l) => l.split(/ {3,}/)),
      [['old', 'h', '3 min ago', 'in 47 min', '-', '-']],
    )
  })

  test('control characters in a job name or holder are shown as escapes, so they cannot drive the terminal or forge a row', async () => {
    const table = await freshTable(pool, 'cli_escape')
    const shown = new Map([
      ['job\nevil:hourly   web-9:1   just now   in 59 min', 'job\\nevil:hourly   web-9:1   just now   in 59 min'],
      ['red\x1b[31mtext\x1b[0m', 'red\\x1b[31mtext\\x1b[0m'],
      ['nel\u0085csi\u009b2J', 'nel\\x85csi\\x9b2J'],
      ['ls\u2028ps\u2029end', 'ls\\u2028ps\\u2029end'],
      ['tab\there\rcr\x7fdel\\n', 'tab\\there\\rcr\\x7fdel\\\\n'],
      ['plain', 'plain'],
    ])
    const holder = 'h\x1b]0;title\x07'
    for (const job of shown.keys()) {
      await withCronLease(pool, job, 60_000, () => {}, { table, holder })
      await setTimes(table, job, '3 min 10 s', '47 min 30 s')
      await setRun(table, job, { finishedAgo: '2 min 30 s', outcome: 'ok', durationMs: 4180 })
    }
    const run = await cli(['status', '--table', table])
    assert.equal(run.code, 0, run.stderr)
    const raw = [...run.stdout].filter((c) => c !== '\n' && /[\p{Cc}\u2028\u2029]/u.test(c))
    assert.deepEqual(raw, [], 'no control character reaches the terminal but the line ends')

    // Rows in the order listLeases gives, columns as wide as their widest escaped cell.
    const rows = (await listLeases(pool, { table })).map((l) => [
      shown.get(l.jobName)!,
      'h\\x1b]0;title\\x07',
      '3 min ago',
      'in 47 min',
      'ok 2 min ago',
      '4.1 s',
      '',
    ])
    const header = ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES', 'LAST RUN', 'TOOK', 'STATE']
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
    const line = (cells: string[]) =>
      cells
        .map((c, i) => (i === 6 ? c : c.padEnd(widths[i]!)))
        .join('   ')
        .trimEnd()
    assert.deepEqual(run.stdout.split('\n').slice(2), [line(header), ...rows.map(line), ''])

    const json = await cli(['status', '--table', table, '--json'])
    const printed: LeaseInfo[] = JSON.parse(json.stdout)
    assert.deepEqual(printed.map((l) => l.jobName).sort(), [...shown.keys()].sort(), '--json keeps the exact names')
    assert.ok(
      printed.every((l) => l.holder === holder),
      '--json keeps the exact holder',
    )
  })

  test('--json prints exactly what listLeases returns, for scripts', async () => {
    const table = await freshTable(pool, 'cli_json')
    await withCronLease(pool, 'a', 60_000, () => {}, { table, holder: 'h1' })
    await withCronLease(pool, 'b', 60_000, () => {}, { table, holder: 'h2' })
    await setTimes(table, 'b', '2 min', '-1 min')
    const run = await cli(['status', '--table', table, '--json'])
    assert.equal(run.code, 0, run.stderr)
    const printed = JSON.parse(run.stdout)
    const listed = await listLeases(pool, { table })
    const stable = (l: LeaseInfo) => ({ ...l, remainingMs: l.held ? 'held' : 0, checkedAt: 'x' })
    assert.deepEqual(printed.map(stable), listed.map(stable))
    assert.ok(printed[0].remainingMs > 0 && printed[0].remainingMs <= 60_000)
    assert.equal(printed[0].checkedAt, printed[1].checkedAt)
    const format = await cli(['status', '--table', table, '--format', 'json'])
    assert.equal(format.code, 0, format.stderr)
    assert.deepEqual(JSON.parse(format.stdout).map(stable), printed.map(stable), '--json is --format json')
  })

  test('--format json carries every field of listLeases, and an open-ended pause has remainingMs null', async () => {
    const table = await severalJobs()
    const run = await cli(['status', '--table', table, '--format', 'json'])
    assert.equal(run.code, 0, run.stderr)
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
    const paused = printed.find((l) => l.jobName === 'sync:failing-paused')!
    assert.deepEqual([paused.leaseUntil, paused.pausedUntil, paused.remainingMs], ['infinity', 'infinity', null])
    const failing = printed.find((l) => l.jobName === 'report:daily')!
    assert.deepEqual([failing.lastOutcome, failing.lastError, failing.lastDurationMs], ['error', 'Error: boom', 850])
  })

  test('--overdue-factor moves the line: 3 h 20 min without a claim, every 1 h, is overdue at 2 and 3, not at 4', async () => {
    const table = await severalJobs()
    const overdue = async (...factor: string[]) => {
      const run = await cli(['status', '--table', table, '--json', ...factor])
      assert.equal(run.code, 0, run.stderr)
      return JSON.parse(run.stdout).find((l: LeaseInfo) => l.jobName === 'import:nightly').overdue
    }
    assert.deepEqual(
      [await overdue(), await overdue('--overdue-factor', '3'), await overdue('--overdue-factor', '4')],
      [true, true, false],
    )
    assert.deepEqual(await overdue('--overdue-factor', '3.5'), false)
  })

  test('a bad --overdue-factor is a usage error, for status and check', async () => {
    for (const command of ['status', 'check']) {
      for (const value of ['0.5', '0', 'abc', '', '-2', '1e3', 'Infinity', ' 2']) {
        assertFails(
          await cli([command, `--overdue-factor=${value}`]),
          2,
          /--overdue-factor must be a finite number, at least 1, got /,
        )
      }
      assertFails(await cli([command, '--overdue-factor']), 2, /--overdue-factor needs a value/)
      assertFails(
        await cli([command, '--overdue-factor', '-2']),
        2,
        /--overdue-factor needs a value; to give one that starts with a dash, write --overdue-factor=<value>/,
      )
    }
  })

  test('--format must be text, json or prometheus, and --json does not go with another format', async () => {
    assertFails(await cli(['status', '--format', 'xml']), 2, /--format must be text, json or prometheus, got "xml"/)
    assertFails(await cli(['status', '--json', '--format', 'prometheus']), 2, /--json is --format json/)
    assertFails(await cli(['check', '--format', 'json']), 2, /unknown option --format for check/)
  })

  test('ages are differences of database timestamps: a machine clock an hour ahead prints the same', async () => {
    const table = await severalJobs()
    // The bin runs with its Date shifted by an hour, as on a replica or laptop with a wrong clock.
    const skewed = {
      NODE_OPTIONS: `--import tsx --import ${path.join(ROOT, 'dev/skew-clock.ts')}`,
      SKEW_MS: String(3_600_000),
    }
    const clockLine = (text: string) => text.replace(new RegExp(ISO_MICROS, 'g'), 'T')
    for (const args of [['status'], ['check']]) {
      const [real, ahead] = [await cli([...args, '--table', table]), await cli([...args, '--table', table], skewed)]
      assert.equal(ahead.code, real.code, ahead.stderr)
      assert.equal(clockLine(ahead.stdout), clockLine(real.stdout))
    }
    const ages = async (env?: Record<string, string>) => {
      const run = await cli(['status', '--table', table, '--format', 'prometheus'], env)
      assert.equal(run.code, 0, run.stderr)
      return parseExposition(run.stdout)
        .get('pg_cron_lease_last_claim_age_seconds')!
        .samples.map((s) => s.value)
    }
    const [real, ahead] = [await ages(), await ages(skewed)]
    for (const [i, age] of real.entries()) assert.ok(Math.abs(ahead[i]! - age) < 60, `${ahead[i]} vs ${age}`)
  })

  test('an empty table says so and exits 0; --json prints []', async () => {
    const table = await freshTable(pool, 'cli_empty')
    assert.deepEqual(await cli(['status', '--table', table]), {
      code: 0,
      stdout: `No leases in ${table} yet: a job appears after its first claim.\n`,
      stderr: '',
    })
    assert.deepEqual(await cli(['status', '--table', table, '--json']), { code: 0, stdout: '[]\n', stderr: '' })
  })

  test('--url wins over DATABASE_URL', async () => {
    const table = await freshTable(pool, 'cli_url')
    const unreachable = `postgres://nobody:pw@127.0.0.1:${await freePort()}/x`
    const run = await cli(['status', '--table', table, '--json', '--url', url], { DATABASE_URL: unreachable })
    assert.deepEqual(run, { code: 0, stdout: '[]\n', stderr: '' })
  })

  test('NO_COLOR turns colours off even when FORCE_COLOR asks for them', async () => {
    const table = await freshTable(pool, 'cli_color')
    await withCronLease(pool, 'job', 60_000, () => {}, { table })
    await setTimes(table, 'job', '5 min 30 s', '30 min 30 s')
    // A run minutes ago, so both runs below print the same age however far apart they start.
    await setRun(table, 'job', { finishedAgo: '2 min 30 s', outcome: 'ok', durationMs: 4180 })
    const forced = await cli(['status', '--table', table], { FORCE_COLOR: '1' })
    assert.equal(forced.code, 0)
    assert.match(
      forced.stdout,
      new RegExp(`${sgr('32').source}in 30 min${sgr('39').source}`),
      'a held lease is green when colours are on',
    )
    // Node itself warns on stderr that it ignores NO_COLOR for its own output; ours is stdout.
    const off = await cli(['status', '--table', table], { FORCE_COLOR: '1', NO_COLOR: '1' })
    assert.equal(off.code, 0)
    assert.doesNotMatch(off.stdout, sgr())
    assert.equal(off.stdout.replace(/\d+(\.\d+)?/g, 'N'), forced.stdout.replace(sgr(), '').replace(/\d+(\.\d+)?/g, 'N'))
    const error = await cli(['status', '--bogus'], { FORCE_COLOR: '1' })
    assert.match(error.stderr, new RegExp(`^${sgr('31').source}pg-cron-lease:${sgr('39').source} unknown option`))
    assertFails(await cli(['status', '--bogus'], { NO_COLOR: '1' }), 2, /unknown option/)
  })
})

describe('database errors exit 1 with one line that says what to do', () => {
  test('an unreachable database names the host and port, and never the password', async () => {
    const port = await freePort()
    const run = await cli(['status', '--url', `postgres://app:hunter2@127.0.0.1:${port}/app`])
    assertFails(
      run,
      1,
      new RegExp(`cannot connect to 127\\.0\\.0\\.1:${port}/app: connection refused; check that Postgres runs there`),
    )
    assert.ok(!run.stderr.includes('hunter2'))
    assertFails(await cli(['migrate'], { DATABASE_URL: `postgres://127.0.0.1:${port}/app` }), 1, /connection refused/)
  })

  test('a wrong password says to check the credentials', async () => {
    const wrong = new URL(url)
    wrong.password = 'not-the-password'
    const run = await cli(['status', '--url', wrong.href])
    assertFails(run, 1, /cannot log in to .*: password authentication failed .*; check the user and password/)
    assert.ok(!run.stderr.includes('not-the-password'))
  })

  test('a missing table suggests migrate, with the same --table', async () => {
    assertFails(
      await cli(['status', '--table', 'no_such_leases']),
      1,
      /the lease table no_such_leases does not exist in .*; create it with: pg-cron-lease migrate --table no_such_leases/,
    )
    // The default table, looked up through a search_path where no cron_leases exists.
    await pool.query('CREATE SCHEMA IF NOT EXISTS cli_empty_schema')
    const elsewhere = new URL(url)
    elsewhere.searchParams.set('options', '-c search_path=cli_empty_schema')
    assertFails(
      await cli(['status', '--url', elsewhere.href]),
      1,
      /the lease table cron_leases does not exist in .*; create it with: pg-cron-lease migrate \(same --url\)$/m,
    )
  })
})

describe('the pg driver is an optional peer', () => {
  test('without pg, status and migrate say to install it (exit 1); sql still works', async () => {
    for (const command of ['status', 'migrate']) {
      assertFails(await cli([command], {}, bare), 1, /the "pg" package is not installed.*run npm install pg/)
    }
    assert.deepEqual(await cli(['sql'], {}, bare), { code: 0, stdout: createTableSql(), stderr: '' })
  })
})

describe('check exits 0 when every job is healthy and 3 when one is overdue or failing', () => {
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
      'import:nightly: OVERDUE: last claimed 3 h ago, every 1 h (factor 2)',
      'report:daily: FAILING: last run failed 5 min ago: Error: boom',
      'sync:failing-paused: FAILING: last run failed 5 min ago: TypeError: no such row; PAUSED until resumed, so it cannot run again until then',
      '',
    ])
    // sync:paused was claimed as long ago as import:nightly, with the same interval: only the pause keeps it healthy.
    assert.equal(run.stdout.includes('sync:paused'), false)
    const looser = await cli(['check', '--table', table, '--overdue-factor', '4'])
    assert.deepEqual([looser.code, looser.stdout.includes('OVERDUE')], [3, false])
  })

  test('--job checks only the named jobs: a healthy one exits 0 whatever the others do; a job with no row is NEVER CLAIMED', async () => {
    const table = await severalJobs()
    const healthy = await cli(['check', '--table', table, '--job', 'billing:hourly', '--job', 'sync:paused'])
    assert.equal(healthy.code, 0, healthy.stderr)
    assert.match(healthy.stdout, /^OK: 2 jobs healthy in /)
    const missing = await cli(['check', '--table', table, '--job', 'billing:hourly', '--job', 'billing:hourlly'])
    assert.deepEqual([missing.code, missing.stderr], [3, ''])
    assert.equal(
      missing.stdout,
      `billing:hourlly: NEVER CLAIMED: no row in ${table}: never claimed, or a typo in the name\n`,
    )
    const twice = await cli(['check', '--table', table, '--job', 'report:daily', '--job', 'report:daily'])
    assert.deepEqual([twice.code, twice.stdout.split('\n').length], [3, 2], 'a job named twice is checked once')
  })

  test('--json: { healthy, checkedAt, table, overdueFactor, jobs } with a verdict per job, and the same exit codes', async () => {
    const table = await severalJobs()
    const run = await cli([
      'check',
      '--table',
      table,
      '--json',
      '--job',
      'import:nightly',
      '--job',
      'sync:failing-paused',
      '--job',
      'billing:hourly',
      '--job',
      'nope',
    ])
    assert.deepEqual([run.code, run.stderr], [3, ''])
    const result = JSON.parse(run.stdout)
    assert.match(result.checkedAt, new RegExp(`^${ISO_MICROS}$`))
    assert.deepEqual(
      { ...result, checkedAt: 'T' },
      {
        healthy: false,
        checkedAt: 'T',
        table,
        overdueFactor: 2,
        jobs: [
          {
            jobName: 'import:nightly',
            healthy: false,
            neverClaimed: false,
            overdue: true,
            failing: false,
            paused: false,
            reason: 'OVERDUE: last claimed 3 h ago, every 1 h (factor 2)',
          },
          {
            jobName: 'sync:failing-paused',
            healthy: false,
            neverClaimed: false,
            overdue: false,
            failing: true,
            paused: true,
            reason:
              'FAILING: last run failed 5 min ago: TypeError: no such row; PAUSED until resumed, so it cannot run again until then',
          },
          {
            jobName: 'billing:hourly',
            healthy: true,
            neverClaimed: false,
            overdue: false,
            failing: false,
            paused: false,
            reason: null,
          },
          {
            jobName: 'nope',
            healthy: false,
            neverClaimed: true,
            overdue: false,
            failing: false,
            paused: false,
            reason: `NEVER CLAIMED: no row in ${table}: never claimed, or a typo in the name`,
          },
        ],
      },
    )
    const ok = await cli(['check', '--table', table, '--json', '--job', 'billing:hourly', '--overdue-factor', '1.5'])
    assert.equal(ok.code, 0, ok.stderr)
    assert.deepEqual([JSON.parse(ok.stdout).healthy, JSON.parse(ok.stdout).overdueFactor], [true, 1.5])
  })

  test('exit 1 when the table cannot be read, exit 2 on a usage error', async () => {
    assertFails(await cli(['check', '--table', 'no_such_leases']), 1, /the lease table no_such_leases does not exist/)
    const port = await freePort()
    assertFails(await cli(['check', '--url', `postgres://a:b@127.0.0.1:${port}/x`]), 1, /connection refused/)
    assertFails(await cli(['check', '--job']), 2, /--job needs a value/)
    assertFails(await cli(['check', '--job', '']), 2, /--job must be a non-empty string/)
    assertFails(await cli(['check', 'billing:hourly']), 2, /unexpected argument "billing:hourly"/)
  })
})

describe('status --format prometheus prints a text exposition that parses strictly', () => {
  /** A job name with everything a label value must escape: a quote, a backslash and a line feed. */
  const AWKWARD = 'say "hi"\\now\nthen'

  async function exposition(table: string): Promise<Map<string, Family>> {
    const run = await cli(['status', '--table', table, '--format', 'prometheus'])
    assert.deepEqual([run.code, run.stderr], [0, ''])
    return parseExposition(run.stdout)
  }

  /** One family's samples as { job name: value }. */
  function values(families: Map<string, Family>, name: string): Record<string, number> {
    const family = families.get(name)
    assert.ok(family, `family ${name}`)
    return Object.fromEntries(family.samples.map((s) => [s.labels.job_name!, s.value]))
  }

  test('every family is a gauge with HELP and TYPE, every sample is labelled job_name only, and label values unescape to the exact job names', async () => {
    const table = await severalJobs()
    await withCronLease(pool, AWKWARD, 60_000, () => {}, { table })
    const families = await exposition(table)
    assert.deepEqual(
      [...families.keys()],
      [
        'pg_cron_lease_held',
        'pg_cron_lease_last_claim_age_seconds',
        'pg_cron_lease_last_success_age_seconds',
        'pg_cron_lease_last_duration_seconds',
        'pg_cron_lease_last_outcome_ok',
        'pg_cron_lease_interval_seconds',
        'pg_cron_lease_overdue',
        'pg_cron_lease_paused',
      ],
    )
    for (const [name, family] of families) {
      assert.equal(family.type, 'gauge', name)
      assert.ok(family.help.length > 10, `${name} has a HELP text`)
      for (const sample of family.samples) assert.deepEqual(Object.keys(sample.labels), ['job_name'], name)
    }
    const names = (await listLeases(pool, { table })).map((l) => l.jobName)
    assert.ok(names.includes(AWKWARD))
    for (const always of [
      'pg_cron_lease_held',
      'pg_cron_lease_last_claim_age_seconds',
      'pg_cron_lease_overdue',
      'pg_cron_lease_paused',
    ]) {
      assert.deepEqual(Object.keys(values(families, always)), names, `${always} has one sample per job, in job order`)
    }
  })

  test('the values: flags, ages by the database clock, durations in seconds; an unknown value has no sample', async () => {
    const families = await exposition(await severalJobs())
    assert.deepEqual(values(families, 'pg_cron_lease_held'), {
      'billing:hourly': 1,
      'import:nightly': 0,
      legacy: 1,
      'report:daily': 0,
      'sync:failing-paused': 1,
      'sync:paused': 1,
      'unknown:outcome': 1,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_overdue'), {
      'billing:hourly': 0,
      'import:nightly': 1,
      legacy: 0,
      'report:daily': 0,
      'sync:failing-paused': 0,
      'sync:paused': 0,
      'unknown:outcome': 0,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_paused'), {
      'billing:hourly': 0,
      'import:nightly': 0,
      legacy: 0,
      'report:daily': 0,
      'sync:failing-paused': 1,
      'sync:paused': 1,
      'unknown:outcome': 0,
    })
    // No run recorded (legacy) or no outcome known (unknown:outcome): no sample rather than a made-up 0.
    assert.deepEqual(values(families, 'pg_cron_lease_last_outcome_ok'), {
      'billing:hourly': 1,
      'import:nightly': 1,
      'report:daily': 0,
      'sync:failing-paused': 0,
      'sync:paused': 1,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_last_duration_seconds'), {
      'billing:hourly': 4.18,
      'import:nightly': 65,
      'report:daily': 0.85,
      'sync:failing-paused': 0.85,
      'sync:paused': 4.18,
      'unknown:outcome': 0.0004,
    })
    assert.deepEqual(values(families, 'pg_cron_lease_interval_seconds'), {
      'billing:hourly': 3600,
      'import:nightly': 3600,
      'sync:paused': 3600,
    })
    // Ages: the offsets severalJobs set, plus however long the test took to get here.
    const within = (value: number | undefined, from: number, what: string) =>
      assert.ok(value !== undefined && value >= from && value < from + 60, `${what}: ${value}`)
    const claimed = values(families, 'pg_cron_lease_last_claim_age_seconds')
    within(claimed['billing:hourly'], 190, 'billing:hourly claimed 3 min 10 s ago')
    within(claimed['import:nightly'], 12_000, 'import:nightly claimed 3 h 20 min ago')
    const success = values(families, 'pg_cron_lease_last_success_age_seconds')
    assert.deepEqual(
      Object.keys(success),
      ['billing:hourly', 'import:nightly', 'sync:paused'],
      'only jobs that ever succeeded',
    )
    within(success['billing:hourly'], 150, 'billing:hourly succeeded 2 min 30 s ago')
    within(success['import:nightly'], 11_400, 'import:nightly succeeded 3 h 10 min ago')
  })

  test('an empty table prints the declarations and # EOF only; a table of the original shape has no run samples', async () => {
    const empty = await exposition(await freshTable(pool, 'cli_prom_empty'))
    assert.equal(empty.size, 8)
    for (const family of empty.values()) assert.deepEqual(family.samples, [])
    const table = await oldShapeTable()
    await withCronLease(pool, 'old', 60_000, () => {}, { table, record: false })
    const old = await exposition(table)
    const sampled = [...old].filter(([, f]) => f.samples.length > 0).map(([name]) => name)
    assert.deepEqual(sampled, [
      'pg_cron_lease_held',
      'pg_cron_lease_last_claim_age_seconds',
      'pg_cron_lease_overdue',
      'pg_cron_lease_paused',
    ])
  })

  test("the test's reader refuses what either format or the textfile collector refuses", () => {
    const good = '# HELP m Help.\n# TYPE m gauge\nm{job_name="a\\"b\\\\c\\nd"} 1.5\n# EOF\n'
    assert.deepEqual(parseExposition(good).get('m')!.samples, [{ labels: { job_name: 'a"b\\c\nd' }, value: 1.5 }])
    for (const bad of [
      '# HELP m Help.\n# TYPE m gauge\nm 1\n', // no # EOF
      '# TYPE m gauge\nm 1\n# EOF\n', // no HELP
      '# HELP m Help.\nm 1\n# EOF\n', // no TYPE
      'm 1\n# EOF\n', // undeclared
      '# HELP m Help.\n# TYPE m gauge\nm 1 1700000000000\n# EOF\n', // a timestamp
      '# HELP m Help.\n# TYPE m gauge\nm one\n# EOF\n', // not a number
      '# HELP m Help.\n# TYPE m gauge\nm{job_name="a\\tb"} 1\n# EOF\n', // an escape the formats do not have
      '# HELP m Help.\n# TYPE m gauge\nm{job_name="a"b"} 1\n# EOF\n', // an unescaped quote
      '# HELP m Help.\n# TYPE m gauge\nm{job_name="a"} 1\nm{job_name="a"} 2\n# EOF\n', // the same labels twice
      '# HELP m Say "hi".\n# TYPE m gauge\nm 1\n# EOF\n', // a quote in HELP
      '# HELP m Help.\n# TYPE m gauge\n\nm 1\n# EOF\n', // a blank line
      '# HELP m Help.\n# TYPE m gauge\n# HELP n Help.\n# TYPE n gauge\nm 1\n# EOF\n', // m comes back after n
      '# HELP m Help.\n# TYPE m gauge\n# a comment\nm 1\n# EOF\n', // a comment
    ]) {
      assert.throws(() => parseExposition(bad), Error, JSON.stringify(bad))
    }
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

  test('usage errors exit 2 before connecting: the job argument, durations, --until, and both ends at once', async () => {
    // An unreachable database: a usage error must be found without it.
    const env = { DATABASE_URL: `postgres://a:b@127.0.0.1:${await freePort()}/x` }
    for (const [args, message] of [
      [['pause'], /^pg-cron-lease: pause needs the name of a job: pg-cron-lease pause <job>/],
      [['resume'], /resume needs the name of a job/],
      [['release', '--table', 'x'], /release needs the name of a job/],
      [['pause', 'a', 'b'], /pause takes one job, got 2: "a" "b"/],
      [['release', ''], /<job> must be a non-empty string/],
      [
        ['pause', 'a', '--for', '1.5h'],
        /--for must be a duration in whole d, h, m and s, such as 90s, 15m, 2h, 1d or 1h30m, got "1\.5h"/,
      ],
      [['pause', 'a', '--for', '90'], /--for must be a duration .* got "90"/],
      [['pause', 'a', '--for', '15 m'], /--for must be a duration .* got "15 m"/],
      [['pause', 'a', '--for', '30m1h'], /--for must be a duration .* got "30m1h"/],
      [['pause', 'a', '--for', '0s'], /--for must be longer than zero, .* got "0s"/],
      [['pause', 'a', '--for', '99999999999999d'], /--for must be at most 9007199254740991 ms/],
      [['pause', 'a', '--for'], /--for needs a value/],
      [
        ['pause', 'a', '--until', '2026-12-01T06:00:00'],
        /--until must be an ISO-8601 date-time with a zone, .* got "2026-12-01T06:00:00"/,
      ],
      [['pause', 'a', '--until', '2027-02-30T06:00:00Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', 'tomorrow'], /--until must be an ISO-8601 date-time/],
      [['pause', 'a', '--for', '1h', '--until', '2030-01-01T00:00:00Z'], /--for and --until cannot both be given/],
      [['resume', 'a', '--for', '1h'], /unknown option --for for resume/],
      [['release', 'a', '--until', '2030-01-01T00:00:00Z'], /unknown option --until for release/],
    ] as const) {
      assertFails(await cli([...args], env), 2, message)
    }
  })

  test('a single-valued option given twice is a usage error naming it, before connecting; --job still repeats', async () => {
    const env = { DATABASE_URL: `postgres://a:secret@127.0.0.1:${await freePort()}/x` }
    const other = `postgres://b:secret@127.0.0.1:${await freePort()}/y`
    for (const [args, option] of [
      [['pause', 'j', '--for', '1h', '--for', '2h'], '--for'],
      [['pause', 'j', '--for=1h', '--for', '1h'], '--for'],
      [['pause', 'j', '--until', '2099-01-01T00:00:00Z', '--until', '2099-01-02T00:00:00Z'], '--until'],
      [['pause', 'j', '--table', 'a', '--table', 'b'], '--table'],
      [['release', 'j', '--table', 'a', '--table', 'a'], '--table'],
      [['status', '--format', 'json', '--format', 'text'], '--format'],
      [['status', '--url', env.DATABASE_URL, '--url', other], '--url'],
      [['check', '--overdue-factor', '2', '--overdue-factor', '3'], '--overdue-factor'],
      [['status', '--overdue-factor', '2', '--overdue-factor', '2'], '--overdue-factor'],
      [['check', '--json', '--json'], '--json'],
    ] as const) {
      const run = await cli([...args], env)
      assertFails(run, 2, new RegExp(`^pg-cron-lease: ${option} is given more than once; .*give it once`))
      assert.doesNotMatch(run.stderr, /secret/, 'no URL is echoed')
    }
    // With the real database: the first of two --for would otherwise be dropped and the second written.
    const { table } = await twoJobs('cli_twice')
    const before = (await pool.query(`SELECT * FROM "${table}" ORDER BY job_name`)).rows
    assertFails(
      await cli(['pause', 'billing:hourly', '--for', '1h', '--for', '2h', '--table', table]),
      2,
      /--for is given/,
    )
    assert.deepEqual((await pool.query(`SELECT * FROM "${table}" ORDER BY job_name`)).rows, before, 'nothing written')
    const jobs = await cli(['check', '--table', table, '--job', 'billing:hourly', '--job', 'bystander'])
    assert.equal(jobs.code, 0, jobs.stderr)
  })

  test('durations read as d, h, m and s, alone or combined', async () => {
    const { table } = await twoJobs('cli_durations')
    for (const [text, seconds] of [
      ['90s', 90n],
      ['15m', 900n],
      ['2h', 7200n],
      ['1d', 86_400n],
      ['1h30m', 5400n],
      ['1d2h3m4s', 93_784n],
    ] as const) {
      const run = await cli(['pause', 'billing:hourly', '--for', text, '--table', table])
      assert.equal(run.code, 0, run.stderr)
      const [, until, at] = new RegExp(`until (${ISO_MICROS}) \\(database clock (${ISO_MICROS})\\)`).exec(run.stdout)!
      assert.equal(micros(until!) - micros(at!), seconds * 1_000_000n, text)
    }
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

  test('--for and --until are read by the library parser: impossible dates, leap days and the last length', async () => {
    const env = { DATABASE_URL: `postgres://a:b@127.0.0.1:${await freePort()}/x` }
    for (const [args, message] of [
      [
        ['pause', 'a', '--until', '2099-02-30T06:00:00Z'],
        /--until must be a date and time that exist.*got "2099-02-30T06:00:00Z"/,
      ],
      [['pause', 'a', '--until', '2099-04-31T06:00:00Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', '2100-02-29T06:00:00Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', '2099-01-01T24:00:00Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', '2099-01-01T06:00:60Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--for', '104249992d'], /--for must be at most 9007199254740991 ms.*got "104249992d"/],
    ] as const) {
      assertFails(await cli([...args], env), 2, message)
    }
    const { table } = await twoJobs('cli_parser')
    for (const [until, utc] of [
      ['2096-02-29T08:00:00+0200', '2096-02-29T06:00:00.000000Z'],
      ['2096-02-29T06:00:00.5z', '2096-02-29T06:00:00.500000Z'],
    ] as const) {
      const run = await cli(['pause', 'billing:hourly', '--until', until, '--table', table])
      assert.equal(run.code, 0, run.stderr)
      assert.match(run.stdout, new RegExp(`^Paused billing:hourly until ${utc.replace(/\./g, '\\.')} `))
    }
  })

  test('an --until after 9999 in UTC is a usage error that changes nothing; a --for that ends after 9999 pauses until resumed', async () => {
    const { table } = await twoJobs('cli_range')
    const rows = async () => (await pool.query(`SELECT * FROM "${table}" ORDER BY job_name`)).rows
    const before = await rows()
    for (const until of ['9999-12-31T23:59:59-12:00', '10000-01-01T00:00:00Z', '1969-12-31T23:59:59Z']) {
      assertFails(
        await cli(['pause', 'billing:hourly', '--until', until, '--table', table]),
        2,
        /^pg-cron-lease: --until must be (between 1970-01-01T00:00:00\.000Z and 9999-12-31T23:59:59\.999Z in UTC|an ISO-8601 date-time with a zone)/,
      )
    }
    assert.deepEqual(await rows(), before, 'nothing written')

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

    assert.match(
      (await cli(['resume', '--help'])).stdout,
      /^Exit codes: 0 resumed, or the job was not paused and nothing changed, 1 /m,
    )
  })

  test('on a table of the original shape pause and resume say to run migrate (exit 1); release works', async () => {
    const table = await oldShapeTable()
    await withCronLease(pool, 'old', 3_600_000, () => {}, { table, record: false })
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

describe('names from the table are printed with their control characters escaped; JSON and Prometheus stay exact', () => {
  const NAME = 'evil\njob\x1b[2J\\'
  const HOLDER = 'host\r\x07'

  test('status, check and pause print one line per job, with \\n, \\x1b and a backslash escaped the same way', async () => {
    const table = await freshTable(pool, 'cli_escape')
    await withCronLease(pool, NAME, 60_000, () => {}, { table, holder: HOLDER, everyMs: 1000 })
    await setTimes(table, NAME, '1 h', '-59 min')
    await setRun(table, NAME, {
      finishedAgo: '1 h',
      outcome: 'error',
      durationMs: 5,
      error: 'Error: \x1b]0;pwned\x07',
      everyMs: 1000,
    })
    const shown = 'evil\\njob\\x1b[2J\\\\'
    const status = await cli(['status', '--table', table])
    assert.equal(status.code, 0, status.stderr)
    assert.ok(status.stdout.split('\n')[3]!.startsWith(`${shown}   host\\r\\x07   `), status.stdout)
    assert.ok(status.stdout.includes(`  ${shown}: Error: \\x1b]0;pwned\\x07\n`))
    const check = await cli(['check', '--table', table])
    assert.equal(check.code, 3)
    assert.equal(
      check.stdout,
      `${shown}: OVERDUE: last claimed 1 h ago, every 1 s (factor 2); FAILING: last run failed 1 h ago: Error: \\x1b]0;pwned\\x07\n`,
    )
    const pause = await cli(['pause', NAME, '--for', '1m', '--table', table])
    assert.equal(pause.code, 0, pause.stderr)
    assert.match(pause.stdout, new RegExp(`^Paused ${shown.replace(/[\\[]/g, '\\$&')} until `))
    for (const run of [status, check, pause]) {
      const lines = run.stdout.split('\n')
      assert.ok(!lines.some((l) => /\p{Cc}/u.test(l)), 'no raw control character reaches the terminal')
    }
    const json = JSON.parse((await cli(['status', '--table', table, '--json'])).stdout)
    assert.deepEqual([json[0].jobName, json[0].holder], [NAME, HOLDER])
    assert.equal(JSON.parse((await cli(['check', '--table', table, '--json'])).stdout).jobs[0].jobName, NAME)
  })
})
