/**
 * The pg-cron-lease bin, run as a child process against the test database. It is built from
 * tsdown.config.ts into a temporary directory laid out like an installed package (package.json,
 * dist/cli.mjs, node_modules), so what runs is the file the package ships, not the TS source.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { build, type UserConfig } from 'tsdown'
import { createTableSql, type LeaseInfo, listLeases, withCronLease } from '../../src/index.ts'
import config from '../../tsdown.config.ts'
import { finished } from '../helpers/child.ts'
import { freePort, freshTable, testDatabaseUrl, testPool } from '../helpers/postgres.ts'

/** An ANSI SGR sequence (colour on or off) with the given code, or any code. */
const sgr = (code = '\\d+') => new RegExp(`${String.fromCharCode(27)}\\[${code}m`, 'g')

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const PACKAGE = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'))
const BIN_PATH: string = PACKAGE.bin['pg-cron-lease']

let pool: pg.Pool
let url: string
/** A directory laid out like an installed package: package.json, dist/cli.mjs, node_modules. */
let installed: string
/** The same bin with no node_modules next to it: `pg` cannot be found. */
let bare: string

before(async () => {
  url = await testDatabaseUrl()
  pool = await testPool()
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
  assert.equal(run.code, code, `exit code (stderr: ${run.stderr})`)
  assert.equal(run.stdout, '')
  assert.match(run.stderr, /^pg-cron-lease: [^\n]+\n$/, 'one line on stderr')
  assert.doesNotMatch(run.stderr, /\bat .*:\d+:\d+/, 'no stack trace')
  assert.match(run.stderr, message)
}

/** Sets a lease's claim and expiry relative to the database clock. */
async function setTimes(table: string, jobName: string, claimedAgo: string, until: string) {
  await pool.query(
    `UPDATE "${table}" SET claimed_at = clock_timestamp() - $2::interval, lease_until = clock_timestamp() + $3::interval
     WHERE job_name = $1`,
    [jobName, claimedAgo, until],
  )
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
    for (const word of ['sql', 'migrate', 'status', '--table', '--url', '--json', 'DATABASE_URL', 'NO_COLOR']) {
      assert.ok(help.stdout.includes(word), `help mentions ${word}`)
    }
    assert.deepEqual(await cli([]), { code: 2, stdout: '', stderr: help.stdout })
    assert.deepEqual(await cli(['help']), help)
  })

  test('each command has its own --help naming only its options, even next to a bad option', async () => {
    for (const [command, has, hasNot] of [
      ['sql', ['--table'], ['--url', '--json']],
      ['migrate', ['--table', '--url'], ['--json']],
      ['status', ['--table', '--url', '--json'], []],
    ] as const) {
      const run = await cli([command, '--help'])
      assert.equal(run.code, 0)
      assert.match(run.stdout, new RegExp(`^Usage: pg-cron-lease ${command}`))
      for (const o of has) assert.ok(run.stdout.includes(o), `${command} --help mentions ${o}`)
      for (const o of hasNot) assert.ok(!run.stdout.includes(o), `${command} --help does not mention ${o}`)
      if (command === 'status') {
        assert.deepEqual(await cli([command, '--bogus', '-h']), run)
        assert.deepEqual(await cli(['help', command]), run)
      }
    }
  })
})

describe('usage errors exit 2 with one line that says what to do', () => {
  test('unknown commands and options, missing or stray values, and a bad --table', async () => {
    for (const [args, message] of [
      [['frob'], /unknown command "frob": expected sql, migrate, status; see pg-cron-lease --help/],
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

  test('no database given, or a --url that is not a postgres URL; the URL is never echoed', async () => {
    assertFails(
      await cli(['status'], { DATABASE_URL: undefined }),
      2,
      /no database to connect to: pass --url .* or set DATABASE_URL/,
    )
    assertFails(await cli(['migrate'], { DATABASE_URL: '' }), 2, /no database to connect to/)
    assertFails(await cli(['status', '--url', 'not a url secret']), 2, /--url is not a URL; expected postgres:\/\//)
    const run = await cli(['status'], { DATABASE_URL: 'mysql://root:secret@host/db' })
    assertFails(run, 2, /DATABASE_URL must start with postgres:\/\/ or postgresql:\/\//)
    assert.ok(!run.stderr.includes('secret'))
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
  test('a readable table: holder, claimed "3 min ago", "in 47 min" for a held lease, "expired 2 h ago"', async () => {
    const table = await freshTable(pool, 'cli_status')
    for (const [job, holder] of [
      ['billing:hourly', 'web-1:4242'],
      ['report:daily', 'web-2:77'],
    ]) {
      await withCronLease(pool, job!, 60_000, () => {}, { table, holder: holder! })
    }
    // Margins of half a unit keep the rounded-down figures stable however slowly the test runs.
    await setTimes(table, 'billing:hourly', '3 min 10 s', '47 min 30 s')
    await setTimes(table, 'report:daily', '3 h 20 min', '-2 h -20 min')
    await pool.query(`INSERT INTO "${table}" (job_name, lease_until) VALUES ('legacy', clock_timestamp())`)
    await setTimes(table, 'legacy', '10 min 30 s', '20 min 30 s')

    const run = await cli(['status', '--table', table])
    assert.equal(run.code, 0, run.stderr)
    assert.equal(run.stderr, '')
    const lines = run.stdout.split('\n')
    assert.match(
      lines[0]!,
      new RegExp(`^${table}: 3 jobs, 2 held \\(database clock \\d{4}-\\d\\d-\\d\\dT[\\d:.]{15}Z\\)$`),
    )
    assert.equal(lines[1], '')
    assert.deepEqual(
      lines.slice(2).map((l) => l.split(/ {3,}/)),
      [
        ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES'],
        ['billing:hourly', 'web-1:4242', '3 min ago', 'in 47 min'],
        ['legacy', '-', '10 min ago', 'in 20 min'],
        ['report:daily', 'web-2:77', '3 h ago', 'expired 2 h ago'],
        [''],
      ],
    )
    assert.doesNotMatch(run.stdout, sgr(), 'no colour when stdout is not a terminal')
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
    ])
    const header = ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES']
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
    const line = (cells: string[]) => cells.map((c, i) => (i === 3 ? c : c.padEnd(widths[i]!))).join('   ')
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
