/** The command line: which command, every option declared once, read into checked values (else exit 2). */
import { parseArgs } from 'node:util'
import { DEFAULT_OVERDUE_GRACE_MS } from '../list-leases.js'
import { DEFAULT_TABLE } from '../sql.js'
import { parseDuration, parseUntil } from '../time-input.js'
import { checkJobName, checkOverdueFactor, checkTable, DEFAULT_OVERDUE_FACTOR } from '../validate.js'
import { oneLine, usage } from './exit.js'
import { duration } from './human.js'

/** The command's name, as help and messages spell it. */
export const BIN = 'pg-cron-lease'

interface OptionSpec {
  type: 'string' | 'boolean'
  multiple?: boolean
  /** The value's placeholder in help, for a string option. */
  arg?: string
  help: string
}

/** Every option of every command: its type, its placeholder in help and its help text. */
export const OPTIONS = {
  table: { type: 'string', arg: '<name>', help: `The lease table, name or schema.name (default: ${DEFAULT_TABLE})` },
  url: { type: 'string', arg: '<url>', help: 'Postgres connection URL (default: the DATABASE_URL variable)' },
  format: {
    type: 'string',
    arg: '<format>',
    help: 'text (default), json (the entries listLeases() returns) or prometheus',
  },
  json: { type: 'boolean', help: 'Print JSON' },
  'overdue-factor': {
    type: 'string',
    arg: '<n>',
    help: `Without --grace, the grace is (n − 1) × the job's interval, at most a minute each (default ${DEFAULT_OVERDUE_FACTOR}, at least 1)`,
  },
  grace: {
    type: 'string',
    arg: '<duration>',
    help: `A job this long past its due time, unclaimed, is overdue, such as 30s or 5m (default: see --overdue-factor; at factor ${DEFAULT_OVERDUE_FACTOR}, its interval, at most ${duration(DEFAULT_OVERDUE_GRACE_MS)})`,
  },
  job: {
    type: 'string',
    multiple: true,
    arg: '<name>',
    help: 'Check only this job; repeat for more. A job with no row is unhealthy',
  },
  for: { type: 'string', arg: '<duration>', help: 'Pause for this long: 90s, 15m, 2h, 1d, or a mix such as 1h30m' },
  until: {
    type: 'string',
    arg: '<iso>',
    help: 'Pause until this date-time, with a zone: 2026-12-01T06:00:00Z, …+02:00',
  },
} as const satisfies Record<string, OptionSpec>

/** The name of an option, without its dashes. */
export type OptionName = keyof typeof OPTIONS

/** What `status` prints: a table, the JSON of listLeases, or a Prometheus text exposition. */
export type Format = 'text' | 'json' | 'prometheus'

/** The command line, checked: every value here is valid, so a command only has to run. */
export interface Values {
  table: string
  url?: string
  format: Format
  overdueFactor: number
  /** --grace in ms; left out for listLeases' own default, which depends on each job's interval. */
  graceMs?: number
  /** check --job, in the order given. */
  jobs: string[]
  /** The <job> argument of pause, resume and release. */
  job?: string
  forMs?: number
  until?: string
}

/** What a command accepts: its options, and whether it takes one <job> argument. */
export interface Accepts {
  options: readonly OptionName[]
  job?: boolean
}

/** "--table <name>", as help shows an option. */
export function flag(name: OptionName): string {
  const spec: OptionSpec = OPTIONS[name]
  return spec.arg === undefined ? `--${name}` : `--${name} ${spec.arg}`
}

/** What the first words of the command line ask for. */
export type Invocation =
  /** No command at all: the main help goes to stderr, and it is a usage error. */
  | { kind: 'no-command' }
  /** The main help (`--help`, `-h`, `help`), or one command's help when `command` is set. */
  | { kind: 'help'; command?: string }
  | { kind: 'version' }
  /** Run `command` with the arguments after its name. */
  | { kind: 'run'; command: string; args: string[] }

/**
 * Which command the line names. Help wins after the name (`status --bogus --help` helps); after
 * `--`, --help is a job's name.
 */
export function readInvocation(argv: readonly string[], commands: readonly string[]): Invocation {
  const [first, ...rest] = argv
  if (first === undefined) return { kind: 'no-command' }
  if (first === '-h' || first === '--help' || (first === 'help' && rest.length === 0)) return { kind: 'help' }
  if (first === '-v' || first === '--version') return { kind: 'version' }
  if (first.startsWith('-')) {
    throw usage(`expected a command (${commands.join(', ')}) before ${first}; see ${BIN} --help`)
  }
  const command = first === 'help' ? rest[0]! : first
  if (!commands.includes(command)) {
    throw usage(`unknown command ${JSON.stringify(command)}: expected ${commands.join(', ')}; see ${BIN} --help`)
  }
  const end = rest.indexOf('--')
  const options = end === -1 ? rest : rest.slice(0, end)
  if (first === 'help' || options.some((a) => a === '-h' || a === '--help')) return { kind: 'help', command }
  return { kind: 'run', command, args: rest }
}

/** One command's arguments as checked values: only its options, each once (--job repeats). */
export function parseOptions(name: string, accepts: Accepts, args: string[]): Values {
  const options: Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> = {}
  for (const o of accepts.options) {
    const spec: OptionSpec = OPTIONS[o]
    options[o] = { type: spec.type, ...(spec.multiple && { multiple: true }) }
  }
  let values: Record<string, unknown>
  let positionals: string[]
  let tokens: { kind: string; name?: string }[]
  try {
    ;({ values, positionals, tokens } = parseArgs({
      args,
      options,
      strict: true,
      allowPositionals: accepts.job === true,
      tokens: true,
    }))
  } catch (error) {
    throw usage(`${describeParseError(error, name)}; see ${BIN} ${name} --help`)
  }
  refuseRepeats(name, tokens)
  const string = (key: OptionName) => (typeof values[key] === 'string' ? (values[key] as string) : undefined)
  const result: Values = {
    table: valid(() => checkTable(values.table, '--table')),
    format: format(string('format'), values.json === true),
    overdueFactor: overdueFactor(string('overdue-factor')),
    jobs: ((values.job as string[] | undefined) ?? []).map((job) => valid(() => checkJobName(job, '--job'))),
  }
  const url = string('url')
  if (url !== undefined) result.url = url
  const graceText = string('grace')
  if (graceText !== undefined) result.graceMs = valid(() => parseDuration(graceText, '--grace'))
  if (accepts.job) {
    if (positionals.length === 0) {
      throw usage(`${name} needs the name of a job: ${BIN} ${name} <job>; see ${BIN} ${name} --help`)
    }
    if (positionals.length > 1) {
      const got = positionals.map((p) => JSON.stringify(p)).join(' ')
      throw usage(`${name} takes one job, got ${positionals.length}: ${got}`)
    }
    result.job = valid(() => checkJobName(positionals[0], '<job>'))
  }
  const forText = string('for')
  const untilText = string('until')
  if (forText !== undefined && untilText !== undefined) {
    throw usage(`--for and --until cannot both be given: a pause has one end; see ${BIN} pause --help`)
  }
  if (forText !== undefined) result.forMs = valid(() => parseDuration(forText, '--for'))
  // A command line only gives text, so the library's offer of a Date would only confuse.
  if (untilText !== undefined) {
    result.until = valid(
      () => parseUntil(untilText, '--until'),
      (m) => m.replace('must be a valid Date, or ', 'must be '),
    )
  }
  return result
}

// parseArgs keeps the last repeat: `--for 1h --for 2h` would silently pause for 2h.
function refuseRepeats(command: string, tokens: { kind: string; name?: string }[]): void {
  const seen = new Set<string>()
  for (const token of tokens) {
    if (token.kind !== 'option' || token.name === undefined) continue
    const spec: OptionSpec = OPTIONS[token.name as OptionName]
    if (spec.multiple) continue
    // The values are not shown: one of them may be a --url with a password.
    if (seen.has(token.name)) {
      const once = spec.type === 'string' ? 'it takes one value, so give it once' : 'give it once'
      throw usage(`--${token.name} is given more than once; ${once}; see ${BIN} ${command} --help`)
    }
    seen.add(token.name)
  }
}

/** A library argument check (TypeError) as a usage error, without the library's prefix. */
function valid<T>(check: () => T, reword: (message: string) => string = (m) => m): T {
  try {
    return check()
  } catch (error) {
    throw usage(reword(oneLine(error).replace(/^pg-cron-lease: /, '')))
  }
}

function format(text: string | undefined, json: boolean): Format {
  if (text !== undefined && text !== 'text' && text !== 'json' && text !== 'prometheus') {
    throw usage(`--format must be text, json or prometheus, got ${JSON.stringify(text)}`)
  }
  if (json && text !== undefined && text !== 'json') {
    throw usage(`--json is --format json, so it cannot go with --format ${text}`)
  }
  return json ? 'json' : (text ?? 'text')
}

function overdueFactor(text: string | undefined): number {
  if (text === undefined) return DEFAULT_OVERDUE_FACTOR
  // Plain decimal only: Number() would also take '', ' 2', '0x10' and '1e3'.
  const value = /^\d+(\.\d+)?$/.test(text) ? Number(text) : Number.NaN
  return valid(() => checkOverdueFactor(Number.isNaN(value) ? text : value, '--overdue-factor'))
}

// parseArgs' own messages suggest `--` tricks that make no sense here; say it plainly instead.
function describeParseError(error: unknown, command: string): string {
  const { code, message } = error as { code?: string; message?: string }
  const quoted = /'([^']*)'/.exec(message ?? '')?.[1] ?? ''
  switch (code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${quoted} for ${command}`
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const option = quoted.split(' ')[0]
      if (/ambiguous/.test(message ?? '')) {
        return `${option} needs a value; to give one that starts with a dash, write ${option}=<value>`
      }
      return `${option} ${/argument missing/.test(message ?? '') ? 'needs a value' : 'takes no value'}`
    }
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument ${JSON.stringify(quoted)}`
    default:
      return oneLine(error)
  }
}
