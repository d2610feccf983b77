/** The command line: which command, every option declared once, checked values, what a command is, how it ends. */
import { parseArgs } from 'node:util'
import type pg from 'pg'
import { type ArgumentError, ERROR_CODES } from '../errors.js'
import { oneLine } from '../format-value.js'
import { duration, type Paint } from '../human.js'
import { DEFAULT_OVERDUE_GRACE_MS } from '../listings.js'
import { checkBasePath, DEFAULTS, OPTIONS as LIBRARY } from '../options.js'
import { DEFAULT_TABLE } from '../sql.js'
import { checkJobName, parseDuration, parseUntil } from '../validate.js'

export const BIN = 'pg-cron-lease'

export type ExitCode = 0 | 1 | 2 | 3

// A USAGE error is found before any connection is made.
export const EXIT = { OK: 0, FAILED: 1, USAGE: 2, UNHEALTHY: 3 } as const satisfies Record<string, ExitCode>

export class Exit extends Error {
  constructor(
    message: string,
    readonly code: typeof EXIT.FAILED | typeof EXIT.USAGE,
  ) {
    super(message)
  }
}

export const usage = (message: string): Exit => new Exit(message, EXIT.USAGE)
export const failed = (message: string): Exit => new Exit(message, EXIT.FAILED)

// Each as its help line reads: the value's placeholder (a switch has none), then what the option does.
const HELP = {
  table: `<name> The lease table, name or schema.name (default: ${DEFAULT_TABLE})`,
  url: '<url> Postgres connection URL (default: the DATABASE_URL variable)',
  format: '<format> text (default), json (the entries listLeases() returns) or prometheus',
  json: 'The same as --format json',
  'overdue-factor': `<n> Without --grace, the grace is (n − 1) × the job's interval, at most a minute each (default ${DEFAULTS.overdueFactor}, at least 1)`,
  grace: `<duration> A job this long past its due time, unclaimed, is overdue, such as 30s or 5m (default: see --overdue-factor; at factor ${DEFAULTS.overdueFactor}, its interval, at most ${duration(DEFAULT_OVERDUE_GRACE_MS)})`,
  job: '<name> Check only this job; repeat for more. A job with no row is unhealthy',
  limit: '<n> At most this many, a whole number from 1 to 10000',
  for: '<duration> Pause for this long: 90s, 15m, 2h, 1d, or a mix such as 1h30m',
  until: '<iso> Pause until this date-time, with a zone: 2026-12-01T06:00:00Z, …+02:00',
  host: '<host> The address to listen on (default 127.0.0.1); beyond loopback, a token is required',
  port: '<port> The port to listen on, 0 for any free one (default 8080)',
  'base-path': '<path> The path prefix requests still carry behind a proxy that keeps it, such as /cron (default /)',
  'allow-actions': 'Show pause, resume and release buttons and accept them; needs a token',
  'allowed-host':
    '<name> Without a token, answer requests for this host name too, besides localhost, 127.0.0.1 and [::1]; repeat for more',
  'token-file':
    '<file> Read the token from this file (else PG_CRON_LEASE_DASHBOARD_TOKEN); never pass it as an argument',
  'lock-timeout': `<duration> How long to wait for the job's row lock, held by another transaction, before giving up (exit 1), such as 30s (default ${duration(DEFAULTS.lockTimeoutMs)})`,
  race: `<n> How many connections race (default ${DEFAULTS.race}, 2 to 100)`,
  rounds: `<n> How many rounds they race (default ${DEFAULTS.rounds}, 1 to 1000)`,
  'no-race': 'Skip the race, for a role that may not write',
  cron: '<expr> The schedule as a cron expression, 5 fields, or 6 with seconds first (needs the croner package)',
  tz: '<zone> The IANA time zone --cron is read in, such as Europe/Berlin (default UTC)',
  every:
    '<duration> The schedule as a fixed interval, such as 15m or 1h: its slots are whole multiples of it since 1970-01-01T00:00Z',
  lease:
    '<duration> How long a claim holds the job before the keep-alive extends it (default: about 80% of the shortest gap)',
  within: '<duration> How far from its slot a fire may be and still run (default: half the shortest gap, at most 5m)',
  'kill-after': '<duration> Once the lease is lost, how long after SIGTERM the command gets SIGKILL (default 10s)',
  'skipped-exit':
    '<n> The exit code when the command does not run here: another host had the slot, or the fire was outside --within (default 0)',
}

export type OptionName = keyof typeof HELP

type OptionSpec = { type: 'string' | 'boolean'; multiple: boolean; arg?: string; help: string }

const REPEATABLE: readonly string[] = ['job', 'allowed-host']

export const OPTIONS = Object.fromEntries(
  Object.entries(HELP).map(([name, line]) => {
    const [, arg, help] = /^(?:(<\S+>) )?(.*)$/.exec(line)!
    return [name, { type: arg ? 'string' : 'boolean', multiple: REPEATABLE.includes(name), arg, help }]
  }),
) as Record<OptionName, OptionSpec>

export type Format = 'text' | 'json' | 'prometheus'

// Every value checked, so a command only has to run; durations in ms.
export type Values = ReturnType<typeof parseOptions>

// argv: takes a command to run after `--`.
export type Accepts = { options: readonly OptionName[]; job?: boolean; argv?: boolean }

// label: host:port/database, for messages; never the password.
export type Target = { url: string; label: string }

interface Context {
  out(text: string): void
  // To stderr, so stdout stays parseable.
  note(text: string): void
  paint: Paint
  env: Readonly<Record<string, string | undefined>>
  connect<T>(work: (client: pg.Client, target: Target) => Promise<T>): Promise<T>
}

export interface Command extends Accepts {
  summary: string
  // The usage line after the command's name, where the one built from its options would mislead.
  synopsis?: string
  optionHelp?: Partial<Record<OptionName, string>>
  details: string
  exitCodes: string
  // Resolves the exit code (exec: its command's; nothing: 0), or throws an Exit.
  run(values: Values, context: Context): Promise<ExitCode | number | undefined>
}

export const DATABASE_EXIT = '1 the database cannot be reached or read (or pg is not installed)'

export function flag(name: OptionName): string {
  const { arg } = OPTIONS[name]
  return arg === undefined ? `--${name}` : `--${name} ${arg}`
}

function misuse(message: string, command?: string): Exit {
  return usage(`${message}; see ${BIN}${command === undefined ? '' : ` ${command}`} --help`)
}

// Help wins after the command's name, but after `--` it is a job's name.
export function readCommand(first: string, rest: string[], commands: readonly string[]) {
  if (first.startsWith('-')) throw misuse(`expected a command (${commands.join(', ')}) before ${first}`)
  const command = first === 'help' ? rest[0]! : first
  if (!commands.includes(command))
    throw misuse(`unknown command ${JSON.stringify(command)}: expected ${commands.join(', ')}`)
  const options = rest.includes('--') ? rest.slice(0, rest.indexOf('--')) : rest
  return { command, help: first === 'help' || options.some((a) => a === '-h' || a === '--help') }
}

type Token = { kind: string; index: number; name?: string; value?: unknown }

export function parseOptions(name: string, accepts: Accepts, args: string[]) {
  let parsed: ReturnType<typeof parseArgs>
  try {
    parsed = parseArgs({
      args,
      options: Object.fromEntries(accepts.options.map((o) => [o, OPTIONS[o]])),
      strict: true,
      allowPositionals: accepts.job === true || accepts.argv === true,
      tokens: true,
    })
  } catch (error) {
    throw misuse(describeParseError(error, name), name)
  }
  const tokens = parsed.tokens as Token[]
  refuseRepeats(name, tokens)
  const given = parsed.values as Record<string, string | undefined>
  const on = parsed.values as Record<string, boolean | undefined>
  const many = parsed.values as Record<string, string[] | undefined>
  const ms = (option: OptionName) => read(given[option], (text) => valid(() => parseDuration(text, `--${option}`)))
  const count = <K extends 'race' | 'rounds' | 'limit'>(option: K) =>
    read(given[option], (text) => library(option, decimal(text, /^\d+$/)))
  if (given.for !== undefined && given.until !== undefined)
    throw misuse('--for and --until cannot both be given: a pause has one end', 'pause')
  const sized = ['race', 'rounds'].find((option) => given[option] !== undefined)
  if (on['no-race'] && sized !== undefined)
    throw misuse(`--no-race cannot go with --${sized}: there is no race to size`, name)
  return {
    table: library('table', given.table),
    format: format(given.format, on.json === true),
    overdueFactor: library('overdueFactor', decimal(given['overdue-factor'], /^\d+(\.\d+)?$/), '--overdue-factor'),
    jobs: (many.job ?? []).map((job) => valid(() => checkJobName(job, '--job'))),
    job: accepts.job ? jobArgument(name, parsed.positionals) : undefined,
    host: given.host ?? '127.0.0.1',
    port: given.port === undefined ? 8080 : whole(given.port, '--port', 65535),
    basePath: read(given['base-path'], (text) => valid(() => checkBasePath(text, '--base-path'))) || '/',
    allowActions: on['allow-actions'] === true,
    allowedHosts: library('allowedHosts', many['allowed-host'], '--allowed-host'),
    tokenFile: given['token-file'],
    url: given.url,
    graceMs: ms('grace'),
    lockTimeoutMs: ms('lock-timeout'),
    argv: accepts.argv ? commandAfterDashes(name, tokens) : undefined,
    everyMs: ms('every'),
    leaseMs: ms('lease'),
    withinMs: ms('within'),
    killAfterMs: ms('kill-after'),
    cron: given.cron,
    tz: given.tz,
    skippedExit: read(given['skipped-exit'], (text) => whole(text, '--skipped-exit', 255)),
    race: on['no-race'] ? false : count('race'),
    rounds: count('rounds'),
    forMs: ms('for'),
    limit: count('limit'),
    until: read(given.until, (text) => valid(() => parseUntil(text, '--until'))),
  }
}

const read = <T>(text: string | undefined, parse: (text: string) => T) => (text === undefined ? undefined : parse(text))

// Plain digits (and a decimal point where allowed) only: Number() would also take '', ' 2', '0x10' and '1e3'.
function decimal(text: string | undefined, pattern: RegExp): unknown {
  return text !== undefined && pattern.test(text) ? Number(text) : text
}

// The library's own check and default for one of its options, named as the command line names it.
function library<K extends keyof typeof LIBRARY>(option: K, value: unknown, flagName = `--${option}`) {
  type Checked = ReturnType<(typeof LIBRARY)[K]['check']>
  const { default: fallback, check } = LIBRARY[option]
  return value === undefined ? (fallback as Checked) : valid(() => check(value, flagName, { leaseMs: 0 }) as Checked)
}

function whole(text: string, flagName: string, max: number): number {
  if (!/^\d+$/.test(text) || text.length > String(max).length || Number(text) > max)
    throw usage(`${flagName} must be a whole number from 0 to ${max}, got ${JSON.stringify(text)}`)
  return Number(text)
}

function jobArgument(name: string, positionals: string[]): string {
  if (positionals.length === 0) throw misuse(`${name} needs the name of a job: ${BIN} ${name} <job>`, name)
  const shown = positionals.map((p) => JSON.stringify(p)).join(' ')
  if (positionals.length > 1) throw usage(`${name} takes one job, got ${positionals.length}: ${shown}`)
  return valid(() => checkJobName(positionals[0], '<job>'))
}

// Everything after `--`, which must be there: without it, the command's own options would be read as ours.
function commandAfterDashes(name: string, tokens: Token[]): string[] {
  const dashes = tokens.find((t) => t.kind === 'option-terminator')
  const before = tokens.find((t) => t.kind === 'positional' && (dashes === undefined || t.index < dashes.index))
  if (before !== undefined || dashes === undefined) {
    const got = before === undefined ? 'none was given' : `got ${JSON.stringify(before.value)} before it`
    throw misuse(`${name} runs the command given after --, as in ${BIN} ${name} ... -- COMMAND [ARG...]; ${got}`, name)
  }
  const argv = tokens.filter((t) => t.kind === 'positional').map((t) => String(t.value))
  if (argv.length === 0 || argv[0] === '')
    throw misuse(`${name} needs a command after --, as in ${BIN} ${name} ... -- COMMAND [ARG...]`, name)
  return argv
}

// parseArgs keeps the last repeat: `--for 1h --for 2h` would silently pause for 2h.
function refuseRepeats(command: string, tokens: Token[]): void {
  const names = tokens.flatMap((t) => (t.kind === 'option' ? [t.name as OptionName] : []))
  const repeated = names.find((name, i) => !OPTIONS[name].multiple && names.indexOf(name) !== i)
  if (repeated === undefined) return
  // The values are not shown: one of them may be a --url with a password.
  const once = OPTIONS[repeated].type === 'string' ? 'it takes one value, so give it once' : 'give it once'
  throw misuse(`--${repeated} is given more than once; ${once}`, command)
}

/** A library check of what was typed; its argument error becomes a usage error naming the flag. */
export function valid<T>(check: () => T): T {
  try {
    return check()
  } catch (error) {
    const { code, argument, detail } = error as Partial<ArgumentError>
    if (code !== ERROR_CODES.INVALID_ARGUMENT) throw error
    // A command line only gives text, so the library's offer of a Date would only confuse.
    throw usage(`${argument} ${detail!.replace(/^must be a valid Date, or /, 'must be ')}`)
  }
}

function format(text: string | undefined, json: boolean): Format {
  if (text !== undefined && text !== 'text' && text !== 'json' && text !== 'prometheus')
    throw usage(`--format must be text, json or prometheus, got ${JSON.stringify(text)}`)
  if (json && text !== undefined && text !== 'json')
    throw usage(`--json is --format json, so it cannot go with --format ${text}`)
  return json ? 'json' : (text ?? 'text')
}

// parseArgs' own messages suggest `--` tricks that make no sense here; say it plainly instead.
function describeParseError(error: unknown, command: string): string {
  const { code, message = '' } = error as { code?: string; message?: string }
  const quoted = /'([^']*)'/.exec(message)?.[1] ?? ''
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return `unknown option ${quoted} for ${command}`
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') return `unexpected argument ${JSON.stringify(quoted)}`
  if (code !== 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') return oneLine(error)
  const option = quoted.split(' ')[0]
  if (/ambiguous/.test(message))
    return `${option} needs a value; to give one that starts with a dash, write ${option}=<value>`
  return `${option} ${/argument missing/.test(message) ? 'needs a value' : 'takes no value'}`
}
