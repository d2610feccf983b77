/**
 * The lines leasedTick's default onError prints on the console: one line an error, and at most one
 * a minute for a job, with the errors in between counted. The clock is the function's own argument.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { ERROR_LINE_EVERY_MS, errorLines } from '../../src/leased-tick.ts'

const T0 = Date.parse('2026-05-01T12:00:00.000Z')

/** errorLines on a clock the test moves: `at(ms)` sets the time, in ms after T0. */
function onClock() {
  let now = T0
  const lineFor = errorLines(() => now)
  return {
    at: (ms: number) => {
      now = T0 + ms
    },
    lineFor,
  }
}

describe('an error is one line: the job, the error name and the first line of its message', () => {
  test('a stack and the lines after the first are left out', () => {
    const { lineFor } = onClock()
    const error = new RangeError('quota exceeded\n    at the second line')
    assert.match(error.stack ?? '', /\n/)
    assert.equal(lineFor(error, 'sync'), "pg-cron-lease: 'sync' tick failed: RangeError: quota exceeded")
  })

  test('a job name that holds a line end is shown escaped, so the line stays one line', () => {
    const { lineFor } = onClock()
    assert.equal(lineFor(new Error('x'), 'a\nb'), "pg-cron-lease: 'a\\nb' tick failed: Error: x")
  })
})

describe("a job's errors are printed at most once a minute, and the next line counts the rest", () => {
  test('errors within a minute of the last line are not printed; the first line after says how many', () => {
    const { at, lineFor } = onClock()
    assert.equal(lineFor(new Error('first'), 'sync'), "pg-cron-lease: 'sync' tick failed: Error: first")
    at(1000)
    assert.equal(lineFor(new Error('second'), 'sync'), undefined)
    at(ERROR_LINE_EVERY_MS - 1)
    assert.equal(lineFor(new Error('third'), 'sync'), undefined)
    at(ERROR_LINE_EVERY_MS)
    assert.equal(
      lineFor(new Error('fourth'), 'sync'),
      "pg-cron-lease: 'sync' tick failed: Error: fourth (2 more not shown since 2026-05-01T12:00:00.000Z)",
    )
  })

  test('the count starts again after each printed line, and the window runs from that line', () => {
    const { at, lineFor } = onClock()
    lineFor(new Error('a'), 'sync')
    at(10_000)
    lineFor(new Error('b'), 'sync')
    at(70_000)
    assert.match(
      lineFor(new Error('c'), 'sync') ?? '',
      /Error: c \(1 more not shown since 2026-05-01T12:00:00\.000Z\)$/,
    )
    at(129_999)
    assert.equal(lineFor(new Error('d'), 'sync'), undefined, 'within a minute of the line at 70 s')
    at(200_000)
    assert.match(
      lineFor(new Error('e'), 'sync') ?? '',
      /Error: e \(1 more not shown since 2026-05-01T12:01:10\.000Z\)$/,
    )
    at(300_000)
    assert.equal(lineFor(new Error('f'), 'sync'), "pg-cron-lease: 'sync' tick failed: Error: f", 'nothing unshown')
  })

  test('a clock set back does not silence the job until it catches up', () => {
    const { at, lineFor } = onClock()
    lineFor(new Error('before'), 'sync')
    at(-3_600_000)
    assert.equal(lineFor(new Error('after'), 'sync'), "pg-cron-lease: 'sync' tick failed: Error: after")
  })
})
