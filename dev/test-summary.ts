/**
 * The test reporter behind `npm test`: Node's TAP output as it is, and, just before the runner's
 * closing count lines (`# tests N` … `# duration_ms N`, which CI reads and so stay last), a short
 * list of every failing test by file and full name. Without it a failure is one `not ok` among
 * thousands of lines.
 *
 *   node --test --test-reporter=./dev/test-summary.ts --test-reporter-destination=stdout …
 *
 * It reads only documented event fields (`name`, `nesting`, `file`, `details.error`), each of
 * them checked, so a field that an older or newer Node leaves out costs a detail of the summary,
 * never the run's output.
 */
import path from 'node:path'
import { tap } from 'node:test/reporters'
import { escapeControls } from '../src/format-value.ts'

/** A test runner event as this reporter reads it: every field may be missing. */
export interface RunnerEvent {
  type: string
  data?: unknown
}

/** One test that failed, or was cancelled, as the summary lists it. */
export interface Failure {
  /** The test file, relative to the working directory; undefined when the runner did not say. */
  file: string | undefined
  /** The name of every enclosing suite or test, outermost first, then the test's own. */
  names: string[]
  /** The first line of the error, `Name: message`. */
  message: string
  /** Cancelled (its parent failed or timed out) rather than failed itself. */
  cancelled: boolean
  /** A suite that failed on its own account (a hook threw), not through a test in it. */
  suite: boolean
}

/** The runner's closing counts, as its `# tests N` … lines give them. */
export type Counts = Partial<Record<'tests' | 'suites' | 'pass' | 'fail' | 'cancelled' | 'skipped' | 'todo', number>>

const COUNT_NAMES = new Set(['tests', 'suites', 'pass', 'fail', 'cancelled', 'skipped', 'todo', 'duration_ms'])
const MESSAGE_LIMIT = 200

/**
 * Follows the runner's events and keeps each failed or cancelled test with its full name path.
 * The path comes from `test:start` events, which arrive parent first; they are kept per file, so
 * files reported side by side cannot mix their paths. A suite that failed only because a test in
 * it did is left out: that test is listed.
 */
export function failureCollector(cwd: string = process.cwd()): {
  add(event: RunnerEvent): void
  failures: Failure[]
} {
  const open = new Map<string | undefined, string[]>()
  const failures: Failure[] = []
  const pathOf = (data: Record<string, unknown>) => {
    const file = typeof data.file === 'string' ? data.file : undefined
    const nesting = typeof data.nesting === 'number' && data.nesting >= 0 ? data.nesting : 0
    const name = typeof data.name === 'string' ? data.name : '(unnamed)'
    let names = open.get(file)
    if (!names) {
      names = []
      open.set(file, names)
    }
    return { file, nesting, name, names }
  }
  return {
    failures,
    add(event) {
      if (!isRecord(event.data)) return
      if (event.type === 'test:start') {
        const { nesting, name, names } = pathOf(event.data)
        names.length = nesting
        names[nesting] = name
        return
      }
      if (event.type !== 'test:fail') return
      const { file, nesting, name, names } = pathOf(event.data)
      const error = isRecord(event.data.details) ? event.data.details.error : undefined
      const failureType = isRecord(error) ? error.failureType : undefined
      if (failureType === 'subtestsFailed') return
      const parents = names.slice(0, nesting).map((n) => n ?? '(unnamed)')
      const relative = file === undefined ? undefined : path.relative(cwd, file) || file
      // A file that failed outside any test (it crashed, or exited non-zero) is named by its path.
      const own = file !== undefined && name === file ? [] : [name]
      failures.push({
        file: relative,
        names: [...parents, ...own],
        message: firstLine(error),
        cancelled: failureType === 'cancelledByParent',
        suite: isRecord(event.data.details) && event.data.details.type === 'suite',
      })
    },
  }
}

/** The closing count a runner diagnostic gives (`pass 12`), or undefined for any other message. */
export function closingCount(event: RunnerEvent): [name: string, value: number] | undefined {
  if (event.type !== 'test:diagnostic' || !isRecord(event.data)) return undefined
  const { message, nesting, file } = event.data
  if (typeof message !== 'string' || (nesting !== undefined && nesting !== 0) || typeof file === 'string') {
    return undefined
  }
  const match = /^(\w+) (\d+(?:\.\d+)?)$/.exec(message)
  return match && COUNT_NAMES.has(match[1]!) ? [match[1]!, Number(match[2])] : undefined
}

/**
 * The summary, as TAP comment lines: the counts, then the failures grouped by file, each with
 * its full name (`describe › test`) and the first line of its error; cancelled tests are counted
 * per file. Every name and message has its control characters escaped, so it stays on its line.
 *
 * @example
 * formatSummary([{ file: 'test/unit/a.test.ts', names: ['rules', 'rejects'], message: 'Error: no', cancelled: false }], { tests: 3, pass: 2, fail: 1 })
 */
export function formatSummary(failures: readonly Failure[], counts: Counts): string {
  const tally = (['tests', 'pass', 'fail', 'cancelled', 'skipped', 'todo'] as const)
    .filter((name) => counts[name] !== undefined)
    .map((name) => `${name} ${counts[name]}`)
    .join(', ')
  const lines = [
    `${failures.length === 0 ? 'No failing tests' : 'Failing tests, by file'}${tally ? ` (${tally})` : ''}`,
  ]
  for (const file of new Set(failures.map((f) => f.file))) {
    const here = failures.filter((f) => f.file === file)
    lines.push(`  ${file === undefined ? '(no file)' : escapeControls(file)}`)
    for (const failure of here.filter((f) => !f.cancelled)) {
      const name = failure.names.length === 0 ? '(the file itself)' : failure.names.map(escapeControls).join(' › ')
      lines.push(`    ✖ ${name}${failure.suite ? ' (suite)' : ''}`, `        ${escapeControls(failure.message)}`)
    }
    const cancelled = here.filter((f) => f.cancelled).length
    if (cancelled > 0) lines.push(`    ${cancelled} test${cancelled === 1 ? '' : 's'} cancelled`)
  }
  return `${lines.map((line) => `# ${line}`).join('\n')}\n`
}

/**
 * The reporter: every event goes to Node's own TAP reporter, except the closing count lines, which
 * are held back and written after the summary.
 */
export default async function* testSummary(source: AsyncIterable<RunnerEvent>): AsyncGenerator<string, void> {
  const collector = failureCollector()
  const held: RunnerEvent[] = []
  const counts: Counts = {}
  const fallback: Counts = {}
  async function* passOn(): AsyncGenerator<RunnerEvent, void> {
    for await (const event of source) {
      collector.add(event)
      if (event.type === 'test:summary') summaryCounts(event, fallback)
      const count = closingCount(event)
      if (count) {
        held.push(event)
        counts[count[0] as keyof Counts] = count[1]
      } else yield event
    }
  }
  yield* tap(passOn() as Parameters<typeof tap>[0])
  yield formatSummary(collector.failures, Object.keys(counts).length > 0 ? counts : fallback)
  let first = true
  for await (const chunk of tap(replay(held) as Parameters<typeof tap>[0])) {
    // The TAP reporter opens every stream with its version line; this is the same stream.
    if (first && chunk.startsWith('TAP version')) {
      first = false
      continue
    }
    first = false
    yield chunk
  }
}

// Node 22 and later also send the totals as one test:summary event, the run's own without a file.
function summaryCounts(event: RunnerEvent, into: Counts): void {
  if (!isRecord(event.data) || event.data.file !== undefined || !isRecord(event.data.counts)) return
  const c = event.data.counts
  const pairs = [
    ['tests', c.tests],
    ['suites', c.suites],
    ['pass', c.passed],
    ['fail', c.failed],
    ['cancelled', c.cancelled],
    ['skipped', c.skipped],
    ['todo', c.todo],
  ] as const
  for (const [name, value] of pairs) if (typeof value === 'number') into[name] = value
}

async function* replay(events: RunnerEvent[]): AsyncGenerator<RunnerEvent, void> {
  yield* events
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null
}

/**
 * `Name: first line`, from the error the test threw (the runner wraps it, as `cause`), with the
 * exit code of a file that failed outside any test.
 */
function firstLine(error: unknown): string {
  if (error === undefined) return '(no error given)'
  try {
    const thrown = isRecord(error) && error.cause !== undefined && error.cause !== null ? error.cause : error
    let text: string
    if (isRecord(thrown)) {
      const name = typeof thrown.name === 'string' && thrown.name !== '' ? thrown.name : 'Error'
      const message = typeof thrown.message === 'string' ? thrown.message : String(thrown.message ?? '')
      // An assertion's first line ends in a colon; what it compares is on the next one.
      const [first = '', second] = message.split(/\r?\n/).filter((line) => line.trim() !== '')
      text = `${name}: ${first.trim()}${first.endsWith(':') && second !== undefined ? ` ${second.trim()}` : ''}`
    } else text = String(thrown)
    if (isRecord(error) && typeof error.exitCode === 'number') text += ` (exit code ${error.exitCode})`
    if (isRecord(error) && typeof error.signal === 'string') text += ` (signal ${error.signal})`
    return text.length > MESSAGE_LIMIT ? `${text.slice(0, MESSAGE_LIMIT - 1)}…` : text
  } catch {
    return '(the error could not be read)'
  }
}
