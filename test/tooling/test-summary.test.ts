/**
 * The summary `npm test` ends with (dev/test-summary.ts): every failing test named by its file and
 * full name, before the runner's own closing counts, which stay the last lines.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import {
  closingCount,
  type Failure,
  failureCollector,
  formatSummary,
  type RunnerEvent,
} from '../../dev/test-summary.ts'

const root = fileURLToPath(new URL('../..', import.meta.url))
const file = path.join(root, 'test/unit/example.test.ts')
const start = (name: string, nesting: number, at = file): RunnerEvent => ({
  type: 'test:start',
  data: { name, nesting, file: at },
})
const fail = (name: string, nesting: number, error: object, extra: object = {}, at = file): RunnerEvent => ({
  type: 'test:fail',
  data: { name, nesting, file: at, details: { error, ...extra } },
})
const thrown = (cause: unknown) => ({ failureType: 'testCodeFailure', cause })

describe('failures are collected with their full name path and their file', () => {
  test('a failing test is named by every enclosing suite, outermost first, and its file relative to the working directory', () => {
    const collector = failureCollector(root)
    for (const event of [
      start('rules', 0),
      start('job names', 1),
      start('rejects an empty name', 2),
      fail('rejects an empty name', 2, thrown(new TypeError('expected a TypeError\nmore'))),
      start('accepts a long name', 2),
      fail('job names', 1, { failureType: 'subtestsFailed' }, { type: 'suite' }),
      fail('rules', 0, { failureType: 'subtestsFailed' }, { type: 'suite' }),
      start('top level', 0),
      fail('top level', 0, thrown(new Error('boom'))),
    ]) {
      collector.add(event)
    }
    assert.deepEqual(collector.failures, [
      {
        file: 'test/unit/example.test.ts',
        names: ['rules', 'job names', 'rejects an empty name'],
        message: 'TypeError: expected a TypeError',
        cancelled: false,
        suite: false,
      },
      {
        file: 'test/unit/example.test.ts',
        names: ['top level'],
        message: 'Error: boom',
        cancelled: false,
        suite: false,
      },
    ])
  })

  test('paths are kept per file, so two files reported side by side do not mix their names', () => {
    const other = path.join(root, 'test/unit/other.test.ts')
    const collector = failureCollector(root)
    collector.add(start('suite a', 0))
    collector.add(start('suite b', 0, other))
    collector.add(start('test a', 1))
    collector.add(start('test b', 1, other))
    collector.add(fail('test a', 1, thrown(new Error('a'))))
    collector.add(fail('test b', 1, thrown(new Error('b')), {}, other))
    assert.deepEqual(
      collector.failures.map((f) => [f.file, f.names]),
      [
        ['test/unit/example.test.ts', ['suite a', 'test a']],
        ['test/unit/other.test.ts', ['suite b', 'test b']],
      ],
    )
  })

  test('a suite whose hook threw is listed as a suite, its tests as cancelled, and a file that crashed as the file itself', () => {
    const collector = failureCollector(root)
    collector.add(start('hooked', 0))
    collector.add(start('never runs', 1))
    collector.add(fail('never runs', 1, { failureType: 'cancelledByParent', cause: new Error('cancelled') }))
    collector.add(
      fail('hooked', 0, { failureType: 'hookFailed', cause: new Error('the hook broke') }, { type: 'suite' }),
    )
    collector.add(start(file, 0))
    collector.add(fail(file, 0, { failureType: 'testCodeFailure', message: 'test failed', exitCode: 1 }))
    assert.deepEqual(
      collector.failures.map((f) => [f.names, f.cancelled, f.suite, f.message]),
      [
        [['hooked', 'never runs'], true, false, 'Error: cancelled'],
        [['hooked'], false, true, 'Error: the hook broke'],
        [[], false, false, 'Error: test failed (exit code 1)'],
      ],
    )
  })

  test("an assertion's message keeps the line after its colon, and a message is cut at 200 characters", () => {
    const collector = failureCollector(root)
    collector.add(
      fail('equal', 0, thrown(new assert.AssertionError({ actual: 2, expected: 3, operator: 'strictEqual' }))),
    )
    collector.add(fail('long', 0, thrown(new Error('x'.repeat(300)))))
    assert.equal(collector.failures[0]!.message, 'AssertionError: Expected values to be strictly equal: 2 !== 3')
    assert.equal(collector.failures[1]!.message.length, 200)
    assert.ok(collector.failures[1]!.message.endsWith('x…'))
  })

  test('events with missing or odd fields are read as far as they go, never thrown on', () => {
    const collector = failureCollector(root)
    collector.add({ type: 'test:start' })
    collector.add({ type: 'test:fail', data: null })
    collector.add({ type: 'test:fail', data: { nesting: 'x', details: { error: 'plain text' } } })
    collector.add({ type: 'test:fail', data: { name: 'no file', nesting: 0, details: {} } })
    assert.deepEqual(collector.failures, [
      { file: undefined, names: ['(unnamed)'], message: 'plain text', cancelled: false, suite: false },
      { file: undefined, names: ['no file'], message: '(no error given)', cancelled: false, suite: false },
    ])
  })
})

describe("the runner's closing counts are recognised, and only they", () => {
  test('a count diagnostic of the run itself (nesting 0, no file) is one', () => {
    const diagnostic = (message: string, data: object = {}): RunnerEvent => ({
      type: 'test:diagnostic',
      data: { message, nesting: 0, ...data },
    })
    assert.deepEqual(closingCount(diagnostic('pass 12')), ['pass', 12])
    assert.deepEqual(closingCount(diagnostic('duration_ms 1234.5')), ['duration_ms', 1234.5])
    assert.equal(closingCount(diagnostic('pass 12', { nesting: 1 })), undefined)
    assert.equal(closingCount(diagnostic('pass 12', { file: file })), undefined)
    assert.equal(closingCount(diagnostic('passed 12')), undefined)
    assert.equal(closingCount(diagnostic('Postgres 18 on port 5432')), undefined)
    assert.equal(closingCount({ type: 'test:stdout', data: { message: 'pass 1' } }), undefined)
  })
})

describe('the summary names each failure on its own lines, as TAP comments', () => {
  const failure = (names: string[], extra: Partial<Failure> = {}): Failure => ({
    file: 'test/unit/a.test.ts',
    names,
    message: 'Error: no',
    cancelled: false,
    suite: false,
    ...extra,
  })

  test('failures are grouped by file with the counts in the heading, and cancelled tests are counted', () => {
    const text = formatSummary(
      [
        failure(['rules', 'rejects']),
        failure(['hooked'], { suite: true }),
        failure(['hooked', 'skipped by it'], { cancelled: true }),
        failure([], { file: 'test/integration/b.test.ts', message: 'Error: test failed (exit code 1)' }),
      ],
      { tests: 9, suites: 2, pass: 6, fail: 2, cancelled: 1, skipped: 0, todo: 0 },
    )
    assert.equal(
      text,
      [
        '# Failing tests, by file (tests 9, pass 6, fail 2, cancelled 1, skipped 0, todo 0)',
        '#   test/unit/a.test.ts',
        '#     ✖ rules › rejects',
        '#         Error: no',
        '#     ✖ hooked (suite)',
        '#         Error: no',
        '#     1 test cancelled',
        '#   test/integration/b.test.ts',
        '#     ✖ (the file itself)',
        '#         Error: test failed (exit code 1)',
        '',
      ].join('\n'),
    )
  })

  test('a run without failures says so in one line', () => {
    assert.equal(formatSummary([], { tests: 3, pass: 3, fail: 0 }), '# No failing tests (tests 3, pass 3, fail 0)\n')
    assert.equal(formatSummary([], {}), '# No failing tests\n')
  })

  test('control characters in names and messages are escaped, so every entry stays on its line', () => {
    const text = formatSummary([failure(['a\nb', 'c\x1b[31m'], { message: 'Error: x\ry' })], {})
    assert.deepEqual(text.split('\n').slice(2, 4), ['#     ✖ a\\nb › c\\x1b[31m', '#         Error: x\\ry'])
  })
})

describe('the reporter, run by node --test', () => {
  test('a failing run prints its TAP, then the failures, then the closing counts last, and exits 1', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-summary-'))
    try {
      const fixture = path.join(dir, 'fixture.test.mjs')
      writeFileSync(
        fixture,
        [
          "import { describe, test } from 'node:test'",
          "describe('outer', () => { test('fails', () => { throw new Error('on purpose') }) })",
          "test('passes', () => {})",
        ].join('\n'),
      )
      const run = spawnSync(
        process.execPath,
        [
          '--test',
          `--test-reporter=${path.join(root, 'dev/test-reporter.mjs')}`,
          '--test-reporter-destination=stdout',
          fixture,
        ],
        // Without the variable that marks this process as a test file's, the child runs as a runner.
        { cwd: dir, encoding: 'utf8', timeout: 60_000, env: { ...process.env, NODE_TEST_CONTEXT: undefined } },
      )
      assert.equal(run.status, 1, run.stderr)
      const lines = run.stdout.trimEnd().split('\n')
      assert.equal(lines.filter((line) => line.startsWith('TAP version')).length, 1, run.stdout)
      assert.ok(lines.includes('not ok 1 - outer'), run.stdout)
      const heading = lines.indexOf(
        '# Failing tests, by file (tests 2, pass 1, fail 1, cancelled 0, skipped 0, todo 0)',
      )
      assert.ok(heading > 0, run.stdout)
      assert.deepEqual(lines.slice(heading + 1, heading + 4), [
        '#   fixture.test.mjs',
        '#     ✖ outer › fails',
        '#         Error: on purpose',
      ])
      assert.deepEqual(
        lines.slice(heading + 4).map((line) => line.replace(/ [\d.]+$/, '')),
        ['# tests', '# suites', '# pass', '# fail', '# cancelled', '# skipped', '# todo', '# duration_ms'],
      )
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
