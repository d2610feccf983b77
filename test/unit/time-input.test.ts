import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import vm from 'node:vm'
import { parseDuration, parseUntil } from '../../src/validate.ts'

/** Asserts a TypeError in the library's style: names the argument, states the rule, shows the value. */
function refuses(call: () => unknown, name: string, rule: RegExp, shown: string) {
  assert.throws(call, (error: unknown) => {
    assert.ok(error instanceof TypeError, `a TypeError, got ${String(error)}`)
    assert.ok(error.message.startsWith(`pg-cron-lease: ${name} must be `), error.message)
    assert.match(error.message, rule)
    assert.ok(error.message.endsWith(`, got ${shown}`), error.message)
    return true
  })
}

describe('parseDuration reads whole d, h, m and s, largest first, each once', () => {
  test('each unit alone and combined, in milliseconds', () => {
    for (const [text, ms] of [
      ['90s', 90_000],
      ['15m', 900_000],
      ['2h', 7_200_000],
      ['1d', 86_400_000],
      ['1h30m', 5_400_000],
      ['1d2h3m4s', 93_784_000],
      ['25h', 90_000_000],
      ['01m', 60_000],
    ] as const) {
      assert.equal(parseDuration(text, '--for'), ms, text)
    }
  })

  test('the longest duration is the largest safe integer of ms; one day more is refused', () => {
    assert.equal(parseDuration('104249991d', 'opts.for'), 104_249_991 * 86_400_000)
    refuses(() => parseDuration('104249992d', 'opts.for'), 'opts.for', /at most 9007199254740991 ms/, '"104249992d"')
    refuses(() => parseDuration('99999999999999999999999d', '--for'), '--for', /at most/, '"99999999999999999999999d"')
  })

  test('anything else is a TypeError naming the argument and showing the text', () => {
    for (const text of [
      '',
      '90',
      '1.5h',
      '15 m',
      ' 15m',
      '30m1h',
      '1h1h',
      '1w',
      '-1h',
      '+1h',
      '1H',
      '1h 30m',
      'PT1H',
    ]) {
      refuses(
        () => parseDuration(text, '--for'),
        '--for',
        /^pg-cron-lease: --for must be a duration in whole d, h, m and s, such as 90s, 15m, 2h, 1d or 1h30m, got /,
        JSON.stringify(text),
      )
    }
  })

  test('zero is refused in every unit', () => {
    for (const text of ['0s', '0m', '0d0h0m0s']) {
      refuses(() => parseDuration(text, 'opts.for'), 'opts.for', /must be longer than zero/, JSON.stringify(text))
    }
  })

  test('a value that is not a string is refused, not thrown on', () => {
    refuses(() => parseDuration(3600 as never, 'opts.for'), 'opts.for', /a duration/, '3600')
    refuses(() => parseDuration(undefined as never, 'opts.for'), 'opts.for', /a duration/, 'undefined')
  })
})

describe('parseUntil reads an ISO-8601 date-time with a zone, or a Date, as UTC text', () => {
  test('Z, +hh:mm and +hhmm offsets give the same instant; seconds and their fraction are optional', () => {
    for (const [text, iso] of [
      ['2026-12-01T06:00:00Z', '2026-12-01T06:00:00.000Z'],
      ['2026-12-01T08:00:00+02:00', '2026-12-01T06:00:00.000Z'],
      ['2026-12-01T08:00:00+0200', '2026-12-01T06:00:00.000Z'],
      ['2026-12-01T01:30:00-04:30', '2026-12-01T06:00:00.000Z'],
      ['2026-12-01T06:00Z', '2026-12-01T06:00:00.000Z'],
      ['2026-12-01T06:00:00.5Z', '2026-12-01T06:00:00.500Z'],
      ['2026-12-01T06:00:00.123456Z', '2026-12-01T06:00:00.123Z'],
      ['2026-12-01t06:00:00z', '2026-12-01T06:00:00.000Z'],
      ['2026-12-01T23:59:59-23:59', '2026-12-02T23:58:59.000Z'],
    ] as const) {
      assert.equal(parseUntil(text, 'opts.until'), iso, text)
    }
  })

  test('a Date gives its instant', () => {
    assert.equal(parseUntil(new Date(Date.UTC(2026, 11, 1, 6)), 'opts.until'), '2026-12-01T06:00:00.000Z')
  })

  test('a text without a zone is refused: it would name a different instant on every machine', () => {
    for (const text of ['2026-12-01T06:00:00', '2026-12-01T06:00', '2026-12-01T06:00:00.000']) {
      refuses(
        () => parseUntil(text, '--until'),
        '--until',
        /must be an ISO-8601 date-time with a zone, such as 2026-12-01T06:00:00Z .*different instant on every machine/,
        JSON.stringify(text),
      )
    }
  })

  test('a text that is not an ISO-8601 date-time, and a value that is neither a string nor a Date, are refused', () => {
    for (const [value, shown] of [
      ['tomorrow', '"tomorrow"'],
      ['', '""'],
      ['2026-12-01', '"2026-12-01"'],
      ['2026-12-01 06:00:00Z', '"2026-12-01 06:00:00Z"'],
      ['2026-12-01T06:00:00+2', '"2026-12-01T06:00:00+2"'],
      ['2026-12-01T06:00:00 +02:00', '"2026-12-01T06:00:00 +02:00"'],
      ['+002026-12-01T06:00:00Z', '"+002026-12-01T06:00:00Z"'],
      ['Tue, 01 Dec 2026 06:00:00 GMT', '"Tue, 01 Dec 2026 06:00:00 GMT"'],
      [1_796_104_800_000, '1796104800000'],
      [null, 'null'],
      [undefined, 'undefined'],
      [{ toISOString: () => '2026-12-01T06:00:00.000Z' }, '{}'],
    ] as const) {
      refuses(
        () => parseUntil(value, 'opts.until'),
        'opts.until',
        /must be a valid Date, or an ISO-8601 date-time with a zone, such as 2026-12-01T06:00:00Z/,
        shown,
      )
    }
  })

  test('an impossible date or time is refused instead of rolled over into the next day or month', () => {
    for (const text of [
      '2099-02-30T06:00:00Z',
      '2099-04-31T06:00:00Z',
      '2099-06-31T06:00:00Z',
      '2099-13-01T06:00:00Z',
      '2099-00-10T06:00:00Z',
      '2099-01-00T06:00:00Z',
      '2099-01-01T24:00:00Z',
      '2099-01-01T25:00:00Z',
      '2099-01-01T06:60:00Z',
      '2099-01-01T06:00:60Z',
      '2099-01-01T06:00:00+24:00',
      '2099-01-01T06:00:00+01:60',
    ]) {
      refuses(() => parseUntil(text, '--until'), '--until', /must be a date and time that exist/, JSON.stringify(text))
    }
  })

  test('February 29th exists in leap years only: 2096 and 2400 have one, 2099 and 2100 do not', () => {
    assert.equal(parseUntil('2096-02-29T06:00:00Z', 'opts.until'), '2096-02-29T06:00:00.000Z')
    assert.equal(parseUntil('2400-02-29T06:00:00Z', 'opts.until'), '2400-02-29T06:00:00.000Z')
    for (const text of ['2099-02-29T06:00:00Z', '2100-02-29T06:00:00Z']) {
      refuses(() => parseUntil(text, 'opts.until'), 'opts.until', /a day the month has/, JSON.stringify(text))
    }
  })

  test('an invalid Date is refused, and shown as one', () => {
    refuses(
      () => parseUntil(new Date(Number.NaN), 'opts.until'),
      'opts.until',
      /must be a valid Date/,
      'an Invalid Date',
    )
  })
})

describe('parseUntil stores only instants that Postgres and new Date() both read with a 4-digit year', () => {
  const RANGE = /must be between 1970-01-01T00:00:00\.000Z and 9999-12-31T23:59:59\.999Z in UTC/

  test('the last millisecond of 9999 and the first of 1970, in UTC, are accepted', () => {
    assert.equal(parseUntil('9999-12-31T23:59:59.999Z', 'opts.until'), '9999-12-31T23:59:59.999Z')
    assert.equal(parseUntil('1970-01-01T00:00:00Z', 'opts.until'), '1970-01-01T00:00:00.000Z')
    assert.equal(
      parseUntil(new Date(Date.UTC(9999, 11, 31, 23, 59, 59, 999)), 'opts.until'),
      '9999-12-31T23:59:59.999Z',
    )
    assert.equal(parseUntil(new Date(0), 'opts.until'), '1970-01-01T00:00:00.000Z')
  })

  test('an offset that moves a local time across a boundary is judged in UTC', () => {
    assert.equal(parseUntil('9999-12-31T23:59:59+12:00', 'opts.until'), '9999-12-31T11:59:59.000Z')
    assert.equal(parseUntil('1970-01-01T00:30:00-01:00', 'opts.until'), '1970-01-01T01:30:00.000Z')
    for (const text of [
      '9999-12-31T23:59:59-12:00',
      '9999-12-31T23:59:59.999-00:01',
      '1970-01-01T00:30:00+01:00',
      '1969-12-31T23:59:59Z',
      '0001-01-01T00:00:00Z',
      '0050-06-01T00:00:00Z',
    ]) {
      refuses(() => parseUntil(text, '--until'), '--until', RANGE, JSON.stringify(text))
    }
  })

  test('a Date outside the range is refused, and shown by its instant', () => {
    refuses(
      () => parseUntil(new Date(8.64e15), 'opts.until'),
      'opts.until',
      RANGE,
      'a Date of +275760-09-13T00:00:00.000Z',
    )
    refuses(
      () => parseUntil(new Date(Date.UTC(10_000, 0, 1)), 'opts.until'),
      'opts.until',
      RANGE,
      'a Date of +010000-01-01T00:00:00.000Z',
    )
    refuses(() => parseUntil(new Date(-1), 'opts.until'), 'opts.until', RANGE, 'a Date of 1969-12-31T23:59:59.999Z')
  })
})

describe('parseUntil refuses a Proxy with its own TypeError, never the trap’s', () => {
  const hostile = () => {
    const boom = () => {
      throw new Error('trap ran')
    }
    return new Proxy(new Date(), { get: boom, getPrototypeOf: boom, has: boom, ownKeys: boom, apply: boom })
  }

  test('a Proxy whose every trap throws', () => {
    refuses(
      () => parseUntil(hostile(), 'opts.until'),
      'opts.until',
      /a valid Date, or an ISO-8601/,
      'a Proxy that throws when inspected',
    )
  })

  test('a revoked Proxy', () => {
    const { proxy, revoke } = Proxy.revocable(new Date(), {})
    revoke()
    refuses(
      () => parseUntil(proxy, 'opts.until'),
      'opts.until',
      /a valid Date, or an ISO-8601/,
      'a Proxy that throws when inspected',
    )
  })

  test('a harmless Proxy of a Date is refused too: it is not a Date, and the built-in methods refuse it', () => {
    assert.throws(
      () => parseUntil(new Proxy(new Date(Date.UTC(2026, 0, 1)), {}), 'opts.until'),
      (e: unknown) =>
        e instanceof TypeError && e.message.startsWith('pg-cron-lease: opts.until must be a valid Date, or'),
    )
  })
})

describe('parseUntil reads a Date subclass or a Date from another realm by the instant it holds', () => {
  test('a subclass that overrides getTime, valueOf and toISOString still gives its own instant', () => {
    class Lying extends Date {
      override getTime() {
        return 0
      }
      override valueOf() {
        return 0
      }
      override toISOString() {
        return 'not a date'
      }
    }
    assert.equal(parseUntil(new Lying(Date.UTC(2026, 11, 1, 6)), 'opts.until'), '2026-12-01T06:00:00.000Z')
    refuses(() => parseUntil(new Lying(Number.NaN), 'opts.until'), 'opts.until', /a valid Date/, 'an Invalid Date')
  })

  test('a Date made in another vm context is a Date', () => {
    const foreign = vm.runInNewContext('new Date(Date.UTC(2026, 11, 1, 6))')
    assert.equal(foreign instanceof Date, false, 'from another realm')
    assert.equal(parseUntil(foreign, 'opts.until'), '2026-12-01T06:00:00.000Z')
    refuses(
      () => parseUntil(vm.runInNewContext('new Date(8.64e15)'), 'opts.until'),
      'opts.until',
      /must be between/,
      'a Date of +275760-09-13T00:00:00.000Z',
    )
  })
})
