/**
 * The command's reading of its input and wording of its results, in-process: the options and
 * their values, the URL echoed in an error, the library's argument errors as usage errors, and
 * the line a change prints. main as a whole is test/unit/cli-main.test.ts; the bin against a real
 * database is test/integration/cli/cli.test.ts.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import type { JobState } from '../../src/admin.ts'
import { type Accepts, Exit, parseOptions } from '../../src/cli/args.ts'
import { masked } from '../../src/cli/connect.ts'
import { asUsage, describeChange } from '../../src/cli/job-actions.ts'
import { argumentError } from '../../src/errors.ts'

const PAUSE: Accepts = { options: ['for', 'until', 'table', 'url'], job: true }
const STATUS: Accepts = { options: ['table', 'url', 'format', 'json', 'grace', 'overdue-factor'] }
const CHECK: Accepts = { options: ['table', 'url', 'job', 'json', 'grace', 'overdue-factor'] }

/** Asserts a usage error (exit 2) whose message matches. */
function usageError(call: () => unknown, message: RegExp) {
  assert.throws(call, (error: unknown) => {
    assert.ok(error instanceof Exit, `an Exit, got ${String(error)}`)
    assert.equal(error.code, 2)
    assert.match(error.message, message)
    return true
  })
}

describe('each option is given once; only --job repeats', () => {
  test('a second --for, --until, --table, --url, --format, --overdue-factor, --grace or --json is a usage error naming it', () => {
    for (const [command, accepts, args, option] of [
      ['pause', PAUSE, ['j', '--for', '1h', '--for', '2h'], '--for'],
      ['pause', PAUSE, ['j', '--for', '1h', '--for=1h'], '--for'],
      ['pause', PAUSE, ['j', '--until', '2099-01-01T00:00:00Z', '--until', '2099-01-01T00:00:00Z'], '--until'],
      ['pause', PAUSE, ['j', '--table', 'a', '--table', 'b'], '--table'],
      ['pause', PAUSE, ['j', '--url', 'postgres://u:pw@h/a', '--url', 'postgres://u:pw@h/b'], '--url'],
      ['status', STATUS, ['--format', 'json', '--format', 'json'], '--format'],
      ['status', STATUS, ['--overdue-factor', '2', '--overdue-factor', '3'], '--overdue-factor'],
      ['check', CHECK, ['--json', '--json'], '--json'],
      ['status', STATUS, ['--grace', '5m', '--grace', '10m'], '--grace'],
      ['check', CHECK, ['--grace', '5m', '--grace=5m'], '--grace'],
    ] as const) {
      usageError(
        () => parseOptions(command, accepts, [...args]),
        new RegExp(`^${option} is given more than once; .*give it once; see pg-cron-lease ${command} --help$`),
      )
    }
  })

  test('the values of a repeated option are not echoed: one may be a URL with a password', () => {
    assert.throws(
      () => parseOptions('status', STATUS, ['--url', 'postgres://u:hunter2@h/a', '--url', 'postgres://u:hunter2@h/b']),
      (error: Error) => !error.message.includes('hunter2'),
    )
  })

  test('--job repeats, in order; a name after -- is not an option', () => {
    assert.deepEqual(parseOptions('check', CHECK, ['--job', 'a', '--job', 'b', '--job', 'a']).jobs, ['a', 'b', 'a'])
    assert.equal(parseOptions('pause', PAUSE, ['--for', '1h', '--', '--for']).job, '--for')
  })
})

describe('--for and --until are read by the library parser and refused as usage errors naming the flag', () => {
  test('valid values arrive as milliseconds and as UTC text', () => {
    assert.equal(parseOptions('pause', PAUSE, ['j', '--for', '1h30m']).forMs, 5_400_000)
    assert.equal(
      parseOptions('pause', PAUSE, ['j', '--until', '2096-02-29T08:00:00+0200']).until,
      '2096-02-29T06:00:00.000Z',
    )
  })

  test('durations read as d, h, m and s, alone or combined', () => {
    for (const [text, seconds] of [
      ['90s', 90],
      ['15m', 900],
      ['2h', 7200],
      ['1d', 86_400],
      ['1h30m', 5400],
      ['1d2h3m4s', 93_784],
      ['104249991d', 104_249_991 * 86_400],
    ] as const) {
      assert.equal(parseOptions('pause', PAUSE, ['j', '--for', text]).forMs, seconds * 1000, text)
    }
  })

  test('--until takes any zone, a lowercase z and a fraction of a second, and gives UTC text', () => {
    for (const [until, utc] of [
      ['2096-02-29T08:00:00+0200', '2096-02-29T06:00:00.000Z'],
      ['2096-02-29T06:00:00.5z', '2096-02-29T06:00:00.500Z'],
      ['2030-01-01T01:30:00+01:30', '2030-01-01T00:00:00.000Z'],
    ] as const) {
      assert.equal(parseOptions('pause', PAUSE, ['j', '--until', until]).until, utc, until)
    }
    const open = parseOptions('pause', PAUSE, ['j'])
    assert.deepEqual([open.forMs, open.until], [undefined, undefined], 'neither: until resumed')
  })

  test('bad values name the flag, without the library prefix, and speak of text only', () => {
    usageError(
      () => parseOptions('pause', PAUSE, ['j', '--for', '90']),
      /^--for must be a duration in whole d, h, m and s/,
    )
    usageError(
      () => parseOptions('pause', PAUSE, ['j', '--until', 'tomorrow']),
      /^--until must be an ISO-8601 date-time with a zone, such as 2026-12-01T06:00:00Z .*, got "tomorrow"$/,
    )
    usageError(
      () => parseOptions('pause', PAUSE, ['j', '--until', '2100-02-29T06:00:00Z']),
      /^--until must be a date and time that exist/,
    )
    usageError(
      () => parseOptions('pause', PAUSE, ['j', '--until', '9999-12-31T23:59:59-12:00']),
      /^--until must be between 1970-01-01T00:00:00\.000Z and 9999-12-31T23:59:59\.999Z in UTC/,
    )
  })
})

describe('status and check read their format and overdue factor', () => {
  test('--overdue-factor is a plain decimal, 2 when not given; --json is --format json; text is the default', () => {
    for (const [args, factor] of [
      [[], 2],
      [['--overdue-factor', '3'], 3],
      [['--overdue-factor', '3.5'], 3.5],
      [['--overdue-factor=4'], 4],
      [['--overdue-factor', '1'], 1],
    ] as const) {
      assert.equal(parseOptions('status', STATUS, [...args]).overdueFactor, factor, args.join(' '))
      assert.equal(parseOptions('check', CHECK, [...args]).overdueFactor, factor, args.join(' '))
    }
    assert.equal(parseOptions('status', STATUS, []).format, 'text')
    assert.equal(parseOptions('status', STATUS, ['--json']).format, 'json')
    assert.equal(parseOptions('status', STATUS, ['--json', '--format', 'json']).format, 'json')
    assert.equal(parseOptions('status', STATUS, ['--format', 'prometheus']).format, 'prometheus')
    assert.equal(parseOptions('check', CHECK, ['--json']).format, 'json')
  })

  test('--grace is a duration read by the library parser, in ms; left out, it stays undefined for listLeases to default', () => {
    for (const [args, ms] of [
      [[], undefined],
      [['--grace', '90s'], 90_000],
      [['--grace', '5m'], 300_000],
      [['--grace=1h30m'], 5_400_000],
      [['--grace', '1d'], 86_400_000],
    ] as const) {
      assert.equal(parseOptions('status', STATUS, [...args]).graceMs, ms, args.join(' '))
      assert.equal(parseOptions('check', CHECK, [...args]).graceMs, ms, args.join(' '))
    }
    for (const [text, message] of [
      ['60', /^--grace must be a duration in whole d, h, m and s, such as 90s, 15m, 2h, 1d or 1h30m, got "60"$/],
      ['1.5m', /^--grace must be a duration .*, got "1\.5m"$/],
      ['0s', /^--grace must be longer than zero, .*, got "0s"$/],
      ['', /^--grace must be a duration .*, got ""$/],
      ['99999999999999d', /^--grace must be at most 9007199254740991 ms/],
    ] as const) {
      usageError(() => parseOptions('check', CHECK, ['--grace', text]), message)
    }
    assert.throws(
      () => parseOptions('pause', PAUSE, ['j', '--grace', '5m']),
      /unknown option --grace for pause/,
      'only status and check judge overdue jobs',
    )
  })

  test('--table defaults to cron_leases and takes schema.name', () => {
    assert.equal(parseOptions('status', STATUS, []).table, 'cron_leases')
    assert.equal(parseOptions('status', STATUS, ['--table', 'jobs.leases']).table, 'jobs.leases')
  })
})

describe("the library's argument errors from pause, resume and release become usage errors naming the flag", () => {
  test('opts.until and opts.forMs are named as --until and --for; the message says nothing was changed, once', () => {
    const past = asUsage(
      argumentError(
        'opts.until',
        'must be a time in the future by the database clock (2026-12-01T09:07:53.318209Z), got "2001-01-01T00:00:00.000Z"',
      ),
    )
    assert.ok(past instanceof Exit)
    assert.equal(past.code, 2)
    assert.equal(
      past.message,
      '--until must be a time in the future by the database clock (2026-12-01T09:07:53.318209Z), got "2001-01-01T00:00:00.000Z"; nothing was changed',
    )
    const said = asUsage(argumentError('opts.until', 'is not in the future; nothing was changed, got "x"'))
    assert.equal(said?.message, '--until is not in the future; nothing was changed, got "x"')
    assert.equal(
      asUsage(argumentError('opts.forMs', 'must be at most 1 ms, got 2'))?.message,
      '--for must be at most 1 ms, got 2; nothing was changed',
    )
  })

  test('any other error stays what it was: a driver error, a plain Error, or a TypeError about the driver result', () => {
    assert.equal(asUsage(Object.assign(new Error('connection reset'), { code: 'ECONNRESET' })), undefined)
    assert.equal(asUsage(new Error('pg-cron-lease: pausing needs columns that t lacks (paused_until)')), undefined)
    assert.equal(asUsage(new TypeError('Cannot read properties of undefined')), undefined)
    // The job's own name, quoted in the message, is data and not an argument's name.
    assert.equal(
      asUsage(
        new TypeError(
          "pg-cron-lease: cannot tell whether 'opts.until' was changed: the driver's result has no rows array",
        ),
      ),
      undefined,
    )
  })
})

describe('a change is described with times that new Date() reads, or as until resumed', () => {
  const AT = '2026-11-30T13:10:17.838662Z'
  const state = (overrides: Partial<JobState & { wasPaused?: boolean }>) => ({
    jobName: 'j',
    leaseUntil: AT,
    pausedUntil: null,
    changedAt: AT,
    ...overrides,
  })

  test('resume: not paused says nothing changed; paused, or not known, says resumed', () => {
    assert.equal(
      describeChange({ action: 'resume' }, 'j', state({ wasPaused: false })),
      `Nothing to resume: j was not paused (database clock ${AT}); nothing changed.`,
    )
    const resumed = `Resumed j (database clock ${AT}); it is not paused, and the next claim on any replica runs it.`
    assert.equal(describeChange({ action: 'resume' }, 'j', state({ wasPaused: true })), resumed)
    assert.equal(describeChange({ action: 'resume' }, 'j', state({})), resumed, 'a library that does not say')
  })

  test('a pause stored open-ended, or ending after the year 9999, is printed as until resumed', () => {
    for (const end of ['infinity', '287396-07-14T13:10:17.838662Z']) {
      assert.equal(
        describeChange(
          { action: 'pause', forMs: 9_007_199_222_400_000 },
          'j',
          state({ pausedUntil: end, leaseUntil: end }),
        ),
        `Paused j until resumed (database clock ${AT}): --for ends after the year 9999, so the pause is open-ended; no replica can claim it until pg-cron-lease resume.`,
      )
      assert.equal(
        describeChange({ action: 'release' }, 'j', state({ pausedUntil: end, leaseUntil: end })),
        `Released the lease of j (database clock ${AT}); it is still paused until resumed, so no replica can claim it before then.`,
      )
    }
    assert.equal(
      describeChange({ action: 'pause' }, 'j', state({ pausedUntil: 'infinity', leaseUntil: 'infinity' })),
      `Paused j until resumed (database clock ${AT}); no replica can claim it until pg-cron-lease resume.`,
    )
  })
})

describe('a URL refused for its form is echoed as typed, with its passwords masked', () => {
  test('what was typed comes back exactly when it holds no password', () => {
    for (const typed of ['localhost:54329', 'db.internal:5432/app', 'postgres://u@h:5432/db', 'password=']) {
      assert.equal(masked(typed), JSON.stringify(typed))
    }
  })

  test('the password of user:password@, of a password= key and of a password query parameter is masked', () => {
    for (const [typed, shown] of [
      ['postgres://u:pw@h/db', 'postgres://u:***@h/db'],
      ['mysql://root:secret@host/db', 'mysql://root:***@host/db'],
      ['u:secret@localhost:5432/db', 'u:***@localhost:5432/db'],
      ['postgres://u:p@ss/w#rd@h/db', 'postgres://u:***@h/db'],
      ['host=h password=secret dbname=d', 'host=h password=*** dbname=d'],
      ["host=h password='se cret' dbname=d", 'host=h password=*** dbname=d'],
      ["host=h password = 'it\\'s' dbname=d", 'host=h password = *** dbname=d'],
      ['host=h password=a&b dbname=d', 'host=h password=*** dbname=d'],
      ['sslpassword=x host=y', 'sslpassword=*** host=y'],
      ['postgres://h/db?sslmode=require&password=abc&x=1', 'postgres://h/db?sslmode=require&password=***&x=1'],
      ['postgres://h/db?PASSWORD=abc#f', 'postgres://h/db?PASSWORD=***#f'],
      ['postgres://u:pw@h/db?password=q', 'postgres://u:***@h/db?password=***'],
    ] as const) {
      assert.equal(masked(typed), JSON.stringify(shown), typed)
    }
  })
})

describe('a change names the job with its control characters escaped', () => {
  test('a name with a line feed, an escape sequence and a backslash is printed on one line', () => {
    const AT = '2026-11-30T13:10:17.838662Z'
    const line = describeChange({ action: 'pause', forMs: 60_000 }, 'evil\njob\x1b[2J\\', {
      jobName: 'evil\njob\x1b[2J\\',
      leaseUntil: '2026-11-30T13:11:17.838662Z',
      pausedUntil: '2026-11-30T13:11:17.838662Z',
      changedAt: AT,
    })
    assert.equal(
      line,
      `Paused evil\\njob\\x1b[2J\\\\ until 2026-11-30T13:11:17.838662Z (database clock ${AT}); no replica can claim it until then.`,
    )
    assert.doesNotMatch(line, /\p{Cc}/u)
  })
})

describe('--lock-timeout on pause, resume and release', () => {
  test('a duration in ms, left out for the library default; a bad one names the flag; other commands refuse it', async () => {
    const { COMMANDS } = await import('../../src/cli/main.ts')
    for (const name of ['pause', 'resume', 'release']) {
      const command = COMMANDS[name]!
      assert.equal(parseOptions(name, command, ['j', '--lock-timeout', '1m30s']).lockTimeoutMs, 90_000, name)
      assert.equal(parseOptions(name, command, ['j']).lockTimeoutMs, undefined, name)
      usageError(() => parseOptions(name, command, ['j', '--lock-timeout', '5']), /^--lock-timeout must be a duration/)
    }
    usageError(
      () => parseOptions('status', COMMANDS.status!, ['--lock-timeout', '5s']),
      /unknown option --lock-timeout/,
    )
  })

  test('a library error about lockTimeoutMs is a usage error naming --lock-timeout', () => {
    const exit = asUsage(argumentError('opts.lockTimeoutMs', 'must be at most 2147483647 ms, got 2592000000'))
    assert.ok(exit instanceof Exit)
    assert.match(exit.message, /^--lock-timeout must be at most 2147483647 ms/)
  })
})
