/**
 * The command as a function: main(argv, io) run in-process with stand-in streams and a stand-in
 * connection that records where it was asked to connect and never reaches a database. Help, the
 * version, sql, and every usage error need no database; a usage error is found before any
 * connection is attempted. The renderers are test/unit/cli-render.test.ts; the bin as a process
 * against a real database is test/integration/cli/cli.test.ts.
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import { Exit, type Target } from '../../src/cli/args.ts'
import { type CliIo, COMMANDS, main } from '../../src/cli/main.ts'
import { createTableSql, TABLE_FACTS_SQL } from '../../src/sql.ts'

const PACKAGE = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'))
const UNREACHABLE = 'postgres://app:hunter2@127.0.0.1:5432/app'

interface Run {
  code: number
  stdout: string
  stderr: string
  /** Where the command asked to connect, in order. */
  connects: Target[]
}

/**
 * Runs main with DATABASE_URL set to a database that is never reached (unless `env` says
 * otherwise; a value of undefined removes the variable). The stand-in connection records the target
 * and fails the way an unreachable database does, with an exit 1.
 */
async function cli(
  args: string[],
  env: Record<string, string | undefined> = {},
  tty: { stdout?: boolean; stderr?: boolean } = {},
): Promise<Run> {
  const run: Run = { code: -1, stdout: '', stderr: '', connects: [] }
  const io: CliIo = {
    stdout: { write: (text) => (run.stdout += text), isTTY: tty.stdout ?? false },
    stderr: { write: (text) => (run.stderr += text), isTTY: tty.stderr ?? false },
    env: Object.fromEntries(Object.entries({ DATABASE_URL: UNREACHABLE, ...env }).filter(([, v]) => v !== undefined)),
    connect: async (target) => {
      run.connects.push(target)
      throw new Exit(`cannot connect to ${target.label}: the unit tests have no database`, 1)
    },
  }
  run.code = await main(args, io)
  return run
}

/** A failure: the exit code, nothing on stdout, and exactly one line on stderr without a stack. */
function assertFails(run: Run, code: 1 | 2, message: RegExp) {
  assert.equal(run.code, code, `exit code (stdout: ${run.stdout}, stderr: ${run.stderr})`)
  assert.equal(run.stdout, '')
  assert.match(run.stderr, /^pg-cron-lease: [^\n]+\n$/, 'one line on stderr')
  assert.doesNotMatch(run.stderr, /\bat .*:\d+:\d+/, 'no stack trace')
  assert.match(run.stderr, message)
}

/** A usage error: exit 2 with one line, and no connection attempted. */
function assertUsage(run: Run, message: RegExp) {
  assertFails(run, 2, message)
  assert.deepEqual(run.connects, [], 'no connection is attempted')
}

/** An ANSI SGR sequence (colour on or off) with the given code, or any code. */
const sgr = (code = '\\d+') => new RegExp(`${String.fromCharCode(27)}\\[${code}m`, 'g')

describe('help and the version need no database', () => {
  test('--help lists every command and exits 0; with no command the same text goes to stderr with exit 2', async () => {
    const help = await cli(['--help'], { DATABASE_URL: undefined })
    assert.equal(help.code, 0)
    assert.equal(help.stderr, '')
    for (const word of ['sql', 'migrate', 'status', 'check', 'pause', 'resume', 'release', '--table', '--url']) {
      assert.ok(help.stdout.includes(word), `help mentions ${word}`)
    }
    for (const word of ['DATABASE_URL', 'NO_COLOR']) assert.ok(help.stdout.includes(word), `help mentions ${word}`)
    assert.match(
      help.stdout,
      /^Exit codes: 0 success, 1 database error, 2 usage error, 3 check found an unhealthy job\.$/m,
      'the exit-code line names all four codes',
    )
    assert.deepEqual(await cli([]), { code: 2, stdout: '', stderr: help.stdout, connects: [] })
    assert.deepEqual(await cli(['help']), help)
    assert.deepEqual(await cli(['-h']), help)
  })

  test('each command has its own --help naming only its options and its exit codes, even next to a bad option', async () => {
    const all = ['--table', '--url', '--json', '--format', '--grace', '--overdue-factor', '--job', '--for', '--until']
    for (const [command, has, exits] of [
      ['sql', ['--table'], ['0', '2']],
      ['migrate', ['--table', '--url'], ['0', '1', '2']],
      ['status', ['--table', '--url', '--json', '--format', '--grace', '--overdue-factor'], ['0', '1', '2']],
      ['check', ['--table', '--url', '--json', '--grace', '--overdue-factor', '--job'], ['0', '1', '2', '3']],
      ['pause', ['--table', '--url', '--for', '--until'], ['0', '1', '2']],
      ['resume', ['--table', '--url'], ['0', '1', '2']],
      ['release', ['--table', '--url'], ['0', '1', '2']],
    ] as const) {
      const run = await cli([command, '--help'])
      assert.deepEqual([run.code, run.stderr, run.connects], [0, '', []])
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

  test('after -- a --help is a job name, not a request for help', async () => {
    const run = await cli(['release', '--', '--help'])
    assert.equal(run.code, 1, 'it tried to release the job')
    assert.deepEqual(
      run.connects.map((t) => t.label),
      ['127.0.0.1:5432/app'],
    )
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
      'lastOccurrence',
      'nextDueAt',
      'missed',
      'NEXT DUE',
      'MISSED',
      'pg_cron_lease_missed_occurrences_total',
      '_next_due_in_seconds',
    ]) {
      assert.ok(status.includes(field), `status --help names ${field}`)
    }
    assert.match(status, /remainingMs is null/)
    assert.match(status, /# EOF/)
    const check = (await cli(['check', '--help'])).stdout
    assert.match(check, /paused job is never overdue, but one FAILING or DIED stays so/)
    assert.match(check, /NEVER CLAIMED/)
    assert.match(check, /OVERDUE {8}it is later than its due time by more than the grace\. Its due time is the\n/)
    assert.match(check, /with none stored, its last claim plus its interval/)
    assert.match(
      check,
      /The grace is --grace, else \(--overdue-factor − 1\)\n {17}× the interval, at most a minute each/,
    )
    for (const help of [status, check]) {
      assert.match(
        help,
        /^ {2}--grace <duration> +A job this long past its due time, unclaimed, is overdue, .*at factor 2, its interval, at most 1 min\)$/m,
      )
    }
  })

  test('the help of resume says that a job that is not paused changes nothing and exits 0', async () => {
    assert.match(
      (await cli(['resume', '--help'])).stdout,
      /^Exit codes: 0 resumed, or the job was not paused and nothing changed, 1 /m,
    )
  })

  test('--version and -v print the version in package.json', async () => {
    for (const flag of ['--version', '-v']) {
      assert.deepEqual(await cli([flag]), { code: 0, stdout: `${PACKAGE.version}\n`, stderr: '', connects: [] })
    }
  })
})

describe('usage errors exit 2 with one line that says what to do, before any connection', () => {
  test('unknown commands and options, missing or stray values, and a bad --table', async () => {
    for (const [args, message] of [
      [
        ['frob'],
        new RegExp(`unknown command "frob": expected ${Object.keys(COMMANDS).join(', ')}; see pg-cron-lease --help`),
      ],
      [['help', 'frob'], /unknown command "frob"/],
      [['--frob'], /expected a command .* before --frob/],
      [['status', '--bogus'], /unknown option --bogus for status; see pg-cron-lease status --help/],
      [['sql', '--url', UNREACHABLE], /unknown option --url for sql/],
      [['status', '--table'], /--table needs a value/],
      [['status', '--json=yes'], /--json takes no value/],
      [['status', 'extra'], /unexpected argument "extra"/],
      [
        ['status', '--table', 'x; DROP TABLE y'],
        /--table must be an identifier or schema\.identifier.*got "x; DROP TABLE y"/,
      ],
      [['sql', '--table', 'a.b.c'], /--table must be/],
    ] as const) {
      assertUsage(await cli([...args]), message)
    }
  })

  test('a value that starts with a dash is taken only as --option=value; after -- a job name may start with one', async () => {
    assertUsage(
      await cli(['status', '--table', '-x']),
      /^pg-cron-lease: --table needs a value; to give one that starts with a dash, write --table=<value>/,
    )
    assertUsage(await cli(['status', '--table=-x']), /^pg-cron-lease: --table must be an identifier/)
    assertUsage(await cli(['pause', '-name']), /^pg-cron-lease: unknown option -n for pause/)
    const after = await cli(['pause', '--for', '1h', '--', '-name'])
    assert.equal(after.code, 1, 'it went on to connect')
    assert.equal(after.connects.length, 1)
  })

  test('no database given, or a --url that is not a postgres URL; the URL is never echoed with its password', async () => {
    assertUsage(
      await cli(['status'], { DATABASE_URL: undefined }),
      /no database to connect to: pass --url .* or set DATABASE_URL/,
    )
    assertUsage(await cli(['migrate'], { DATABASE_URL: '' }), /no database to connect to/)
    assertUsage(await cli(['status', '--url', 'not a url']), /--url is not a URL; expected postgres:\/\//)
    const run = await cli(['status'], { DATABASE_URL: 'mysql://root:secret@host/db' })
    assertUsage(run, /DATABASE_URL must start with postgres:\/\/ or postgresql:\/\//)
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
      assertUsage(run, new RegExp(`^pg-cron-lease: ${source} (must start with|is not a URL)`))
      assert.ok(run.stderr.endsWith(`, got ${JSON.stringify(shown)}\n`), run.stderr)
      assert.doesNotMatch(run.stderr, /secret|sec ret|sec@ret/, 'the password is masked')
    }
  })

  test('a malformed percent-encoding in --url or DATABASE_URL says which and where, and never echoes the URL', async () => {
    for (const [bad, part] of [
      ['postgres://u:%zz@127.0.0.1:5432/db', 'password'],
      ['postgres://u:%e9secret@127.0.0.1:5432/db', 'password'],
      ['postgres://u%zz:secret@127.0.0.1:5432/db', 'user name'],
      ['postgres://u:secret@127.0.0.1:5432/d%zz', 'database name'],
    ] as const) {
      const viaFlag = await cli(['status', '--url', bad])
      assertUsage(viaFlag, new RegExp(`--url has a malformed percent-encoding in its ${part}`))
      const viaEnv = await cli(['migrate'], { DATABASE_URL: bad })
      assertUsage(viaEnv, new RegExp(`DATABASE_URL has a malformed percent-encoding in its ${part}`))
      for (const { stderr } of [viaFlag, viaEnv]) {
        assert.ok(!/secret|%zz|%e9/.test(stderr), `the URL is not echoed: ${stderr}`)
      }
    }
  })

  test('a bad --overdue-factor is a usage error, for status and check', async () => {
    for (const command of ['status', 'check']) {
      for (const value of ['0.5', '0', 'abc', '', '-2', '1e3', 'Infinity', ' 2']) {
        assertUsage(
          await cli([command, `--overdue-factor=${value}`]),
          /--overdue-factor must be a finite number, at least 1, got /,
        )
      }
      assertUsage(await cli([command, '--overdue-factor']), /--overdue-factor needs a value/)
      assertUsage(
        await cli([command, '--overdue-factor', '-2']),
        /--overdue-factor needs a value; to give one that starts with a dash, write --overdue-factor=<value>/,
      )
    }
  })

  test('a bad --grace is a usage error naming it, for status and check; pause and release do not take it', async () => {
    for (const command of ['status', 'check']) {
      for (const value of ['60', '1.5m', '5 m', '-1m', 'm', '1m30', '30s1m']) {
        assertUsage(
          await cli([command, `--grace=${value}`]),
          /^pg-cron-lease: --grace must be a duration in whole d, h, m and s/,
        )
      }
      assertUsage(await cli([command, '--grace', '0m']), /--grace must be longer than zero/)
      assertUsage(await cli([command, '--grace']), /--grace needs a value/)
    }
    assertUsage(await cli(['pause', 'j', '--grace', '1m']), /unknown option --grace for pause/)
    assertUsage(await cli(['release', 'j', '--grace', '1m']), /unknown option --grace for release/)
  })

  test('--format must be text, json or prometheus, and --json does not go with another format', async () => {
    assertUsage(await cli(['status', '--format', 'xml']), /--format must be text, json or prometheus, got "xml"/)
    assertUsage(await cli(['status', '--json', '--format', 'prometheus']), /--json is --format json/)
    assertUsage(await cli(['check', '--format', 'json']), /unknown option --format for check/)
  })

  test('check: --job needs a non-empty value, and a job is named with --job, not as an argument', async () => {
    assertUsage(await cli(['check', '--job']), /--job needs a value/)
    assertUsage(await cli(['check', '--job', '']), /--job must be a non-empty string/)
    assertUsage(await cli(['check', 'billing:hourly']), /unexpected argument "billing:hourly"/)
  })

  test('pause, resume and release: the job argument, durations, --until, and both ends at once', async () => {
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
      [['pause', 'a', '--for', '104249992d'], /--for must be at most 9007199254740991 ms.*got "104249992d"/],
      [['pause', 'a', '--for'], /--for needs a value/],
      [
        ['pause', 'a', '--until', '2026-12-01T06:00:00'],
        /--until must be an ISO-8601 date-time with a zone, .* got "2026-12-01T06:00:00"/,
      ],
      [['pause', 'a', '--until', '2027-02-30T06:00:00Z'], /--until must be a date and time that exist/],
      [
        ['pause', 'a', '--until', '2099-02-30T06:00:00Z'],
        /--until must be a date and time that exist.*got "2099-02-30T06:00:00Z"/,
      ],
      [['pause', 'a', '--until', '2099-04-31T06:00:00Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', '2100-02-29T06:00:00Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', '2099-01-01T24:00:00Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', '2099-01-01T06:00:60Z'], /--until must be a date and time that exist/],
      [['pause', 'a', '--until', 'tomorrow'], /--until must be an ISO-8601 date-time/],
      [['pause', 'a', '--for', '1h', '--until', '2030-01-01T00:00:00Z'], /--for and --until cannot both be given/],
      [['resume', 'a', '--for', '1h'], /unknown option --for for resume/],
      [['release', 'a', '--until', '2030-01-01T00:00:00Z'], /unknown option --until for release/],
    ] as const) {
      assertUsage(await cli([...args]), message)
    }
  })

  test('an --until after 9999 or before 1970 in UTC is a usage error', async () => {
    for (const until of ['9999-12-31T23:59:59-12:00', '10000-01-01T00:00:00Z', '1969-12-31T23:59:59Z']) {
      assertUsage(
        await cli(['pause', 'billing:hourly', '--until', until]),
        /^pg-cron-lease: --until must be (between 1970-01-01T00:00:00\.000Z and 9999-12-31T23:59:59\.999Z in UTC|an ISO-8601 date-time with a zone)/,
      )
    }
  })

  test('a single-valued option given twice is a usage error naming it, and no URL is echoed', async () => {
    const first = 'postgres://a:secret@127.0.0.1:5432/x'
    const other = 'postgres://b:secret@127.0.0.1:5433/y'
    for (const [args, option] of [
      [['pause', 'j', '--for', '1h', '--for', '2h'], '--for'],
      [['pause', 'j', '--for=1h', '--for', '1h'], '--for'],
      [['pause', 'j', '--until', '2099-01-01T00:00:00Z', '--until', '2099-01-02T00:00:00Z'], '--until'],
      [['pause', 'j', '--table', 'a', '--table', 'b'], '--table'],
      [['release', 'j', '--table', 'a', '--table', 'a'], '--table'],
      [['status', '--format', 'json', '--format', 'text'], '--format'],
      [['status', '--url', first, '--url', other], '--url'],
      [['check', '--overdue-factor', '2', '--overdue-factor', '3'], '--overdue-factor'],
      [['status', '--overdue-factor', '2', '--overdue-factor', '2'], '--overdue-factor'],
      [['check', '--json', '--json'], '--json'],
      [['check', '--grace', '1m', '--grace', '2m'], '--grace'],
      [['status', '--grace=1m', '--grace', '1m'], '--grace'],
    ] as const) {
      const run = await cli([...args], { DATABASE_URL: first })
      assertUsage(run, new RegExp(`^pg-cron-lease: ${option} is given more than once; .*give it once`))
      assert.doesNotMatch(run.stderr, /secret/, 'no URL is echoed')
    }
  })
})

describe('doctor: its flags are checked before any connection', () => {
  test('--race, --rounds and --no-race: whole numbers in range, and --no-race alone; --format text or json', async () => {
    assertUsage(await cli(['doctor', '--race', '1']), /--race must be a whole number from 2 to 100, got 1$/m)
    assertUsage(await cli(['doctor', '--race', '101']), /--race must be a whole number from 2 to 100, got 101/)
    assertUsage(await cli(['doctor', '--race', '1e1']), /--race must be a whole number from 2 to 100, got "1e1"/)
    assertUsage(await cli(['doctor', '--rounds', '0']), /--rounds must be a whole number from 1 to 1000, got 0/)
    assertUsage(await cli(['doctor', '--rounds', ' 5']), /--rounds must be a whole number/)
    assertUsage(await cli(['doctor', '--no-race', '--race', '5']), /--no-race cannot go with --race/)
    assertUsage(await cli(['doctor', '--rounds', '5', '--no-race']), /--no-race cannot go with --rounds/)
    assertUsage(await cli(['doctor', '--no-race=yes']), /--no-race takes no value/)
    assertUsage(await cli(['doctor', '--format', 'prometheus']), /doctor prints --format text or json, not prometheus/)
    assertUsage(await cli(['doctor', '--race', '3', '--race', '4']), /--race is given more than once/)
    assertUsage(await cli(['doctor', '--job', 'x']), /unknown option --job for doctor/)
    assertUsage(await cli(['status', '--race', '3']), /unknown option --race for status/)
  })

  test('doctor --help names its flags, its checks and its exit codes', async () => {
    const help = await cli(['doctor', '--help'])
    assert.equal(help.code, 0)
    assert.match(
      help.stdout,
      /^Usage: pg-cron-lease doctor \[--table <name>\] \[--url <url>\] \[--format <format>\] \[--race <n>\] \[--rounds <n>\] \[--no-race\]$/m,
    )
    for (const id of [
      'connection',
      'writable',
      'table',
      'privileges',
      'clock',
      'pooler',
      'prepared',
      'durability',
      'timeouts',
      'race',
    ]) {
      assert.match(help.stdout, new RegExp(`\\b${id}\\b`), `help names the ${id} check`)
    }
    assert.match(
      help.stdout,
      /Exit codes: 0 no check failed \(warnings allowed\), 1 .*, 2 usage error, 3 a check failed\./,
    )
  })

  test('doctor connects to --url, as every command does, and a database it cannot reach is exit 1', async () => {
    const run = await cli(['doctor', '--url', 'postgres://u:pw@db.example:6543/app'])
    assertFails(run, 1, /cannot connect to db\.example:6543\/app/)
    assert.deepEqual(
      run.connects.map((t) => t.label),
      ['db.example:6543/app'],
    )
  })
})

describe('sql prints the DDL without a database', () => {
  test('the default table and a schema-qualified one, byte for byte what createTableSql returns', async () => {
    assert.deepEqual(await cli(['sql'], { DATABASE_URL: undefined }), {
      code: 0,
      stdout: createTableSql(),
      stderr: '',
      connects: [],
    })
    assert.deepEqual(await cli(['sql', '--table', 'jobs.leases']), {
      code: 0,
      stdout: createTableSql('jobs.leases'),
      stderr: '',
      connects: [],
    })
  })
})

describe('where a command connects', () => {
  test('--url wins over DATABASE_URL; without it DATABASE_URL is used; messages name host:port/database only', async () => {
    const url = 'postgres://me:pw@db.internal:6432/app'
    for (const command of [['migrate'], ['status'], ['check'], ['pause', 'j'], ['resume', 'j'], ['release', 'j']]) {
      const flagged = await cli([...command, '--url', url])
      assert.deepEqual(
        flagged.connects.map((t) => t.url),
        [url],
        `${command[0]} connects to --url`,
      )
      assert.deepEqual(
        (await cli(command)).connects.map((t) => t.url),
        [UNREACHABLE],
        `${command[0]} connects to DATABASE_URL`,
      )
      assert.equal(flagged.connects[0]?.label, 'db.internal:6432/app')
    }
  })

  test('a failure inside a command that is not an Exit is one line, exit 1, that says it was unexpected', async () => {
    const run = { stdout: '', stderr: '' }
    const code = await main(['status'], {
      stdout: { write: (text) => (run.stdout += text) },
      stderr: { write: (text) => (run.stderr += text) },
      env: { DATABASE_URL: UNREACHABLE },
      connect: async () => {
        throw new Error('first line\n  second line')
      },
    })
    assert.deepEqual(
      [code, run.stdout, run.stderr],
      [1, '', 'pg-cron-lease: unexpected error: first line second line\n'],
    )
  })
})

describe('status and check hand --grace to listLeases as overdueGraceMs', () => {
  /**
   * Runs main against a stand-in client whose one row is what listLeasesSql returns for a job every
   * 5 min whose next due time passed 90 s before the reading, unclaimed, 2 occurrences missed so far.
   */
  async function late(args: string[]) {
    const CHECKED = '2026-11-30T12:00:00.000000Z'
    const row = {
      job_name: 'report:5min',
      holder: 'web-1',
      claimed_at: '2026-11-30T11:56:30.000000Z',
      lease_until: '2026-11-30T11:57:30.000000Z',
      held: false,
      remaining_ms: 0,
      checked_at: CHECKED,
      last_outcome: 'ok',
      last_ended_outcome: 'ok',
      last_started_at: '2026-11-30T11:56:30.000000Z',
      last_finished_at: '2026-11-30T11:56:31.000000Z',
      last_duration_ms: 1000,
      last_error: null,
      last_success_at: '2026-11-30T11:56:31.000000Z',
      every_ms: 300_000,
      paused_until: null,
      paused: false,
      resumed_at: null,
      last_occurrence: '2026-11-30T11:53:30.000000Z',
      next_due_at: '2026-11-30T11:58:30.000000Z',
      since_due_ms: 90_000,
      missed: 2,
      unfinished_runs: 0,
    }
    const run = { code: -1, stdout: '', stderr: '', queries: 0 }
    let facts = 0
    run.code = await main(args, {
      stdout: { write: (text) => (run.stdout += text) },
      stderr: { write: (text) => (run.stderr += text) },
      env: { DATABASE_URL: UNREACHABLE },
      connect: (_target, _doing, work) => {
        const client = {
          query: async (text: string) => {
            if (text === TABLE_FACTS_SQL) {
              facts++
              return { rows: [{ exists: true, columns: 18, current: true, history: true, checked_at: CHECKED }] }
            }
            run.queries++
            return { rows: [row] }
          },
        }
        return work(client as unknown as Parameters<typeof work>[0])
      },
    })
    assert.equal(run.stderr, '')
    assert.equal(facts, 1, "one read of the table's facts")
    assert.equal(run.queries, 1, 'one read of the table')
    return run
  }

  test('check: 90 s past its due time is overdue with the default grace (its interval, at most 1 min) and with --grace 1m, not with --grace 2m', async () => {
    const reason = 'report:5min: OVERDUE: due 2026-11-30T11:58:30.000000Z, not claimed for 1 min'
    assert.deepEqual(await late(['check']), {
      code: 3,
      stdout: `${reason} (grace 1 min)\n`,
      stderr: '',
      queries: 1,
    })
    assert.deepEqual(
      [(await late(['check', '--grace', '1m'])).code, (await late(['check', '--grace', '89s'])).stdout],
      [3, `${reason} (grace 1 min 29 s)\n`],
    )
    const looser = await late(['check', '--grace', '2m'])
    assert.equal(looser.code, 0)
    assert.match(looser.stdout, /^OK: 1 job healthy in cron_leases /)
    assert.equal((await late(['check', '--grace', '90s'])).code, 0, 'overdue only when later than the grace')
  })

  test('status: --grace moves overdue in every format; lastOccurrence, nextDueAt and missed are printed as read', async () => {
    const json = async (...grace: string[]) => JSON.parse((await late(['status', '--json', ...grace])).stdout)[0]
    const printed = await json()
    assert.deepEqual(
      [printed.overdue, printed.lastOccurrence, printed.nextDueAt, printed.missed],
      [true, '2026-11-30T11:53:30.000000Z', '2026-11-30T11:58:30.000000Z', 2],
    )
    assert.equal((await json('--grace', '2m')).overdue, false)
    const text = (await late(['status'])).stdout
    assert.match(text, /^report:5min .* due 1 min ago +2 +OVERDUE$/m)
    assert.doesNotMatch((await late(['status', '--grace', '5m'])).stdout, /OVERDUE/)
    const metrics = (await late(['status', '--format', 'prometheus', '--grace', '2m'])).stdout
    assert.match(metrics, /^pg_cron_lease_overdue\{job_name="report:5min"\} 0$/m)
    assert.match(metrics, /^pg_cron_lease_next_due_in_seconds\{job_name="report:5min"\} -90$/m)
    assert.match(metrics, /^pg_cron_lease_missed_occurrences_total\{job_name="report:5min"\} 2$/m)
  })
})

describe('the error line is red only when colours are on', () => {
  test('FORCE_COLOR paints the prefix red; NO_COLOR turns it off; a terminal turns it on', async () => {
    const forced = await cli(['status', '--bogus'], { FORCE_COLOR: '1' })
    assert.match(forced.stderr, new RegExp(`^${sgr('31').source}pg-cron-lease:${sgr('39').source} unknown option`))
    assertUsage(await cli(['status', '--bogus'], { FORCE_COLOR: '1', NO_COLOR: '1' }), /unknown option/)
    assertUsage(await cli(['status', '--bogus'], { NO_COLOR: '1' }, { stderr: true }), /unknown option/)
    assertUsage(await cli(['status', '--bogus']), /unknown option/)
    const terminal = await cli(['status', '--bogus'], {}, { stderr: true })
    assert.match(terminal.stderr, new RegExp(`^${sgr('31').source}pg-cron-lease:`))
  })
})
