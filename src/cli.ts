#!/usr/bin/env node
/**
 * The `pg-cron-lease` command: print or apply the DDL, and show who holds which lease.
 *
 * Exit codes: 0 success, 1 the database (or the `pg` driver) could not do it, 2 a usage error.
 * Every error is one line on stderr that says what to do; no stack trace. The URL is never
 * printed, because it usually carries a password.
 */
import { readFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import type pg from 'pg'
import { escapeControls } from './escape.js'
import { type LeaseInfo, listLeases } from './list-leases.js'
import { createTableSql, DEFAULT_TABLE, quoteTable, upgradeTableSql } from './sql.js'
import { checkTable } from './validate.js'

const BIN = 'pg-cron-lease'
const CONNECT_TIMEOUT_MS = 10_000

type OptionName = 'table' | 'url' | 'json'

const OPTIONS = {
  table: { type: 'string', help: `--table <name>  The lease table, name or schema.name (default: ${DEFAULT_TABLE})` },
  url: { type: 'string', help: '--url <url>     Postgres connection URL (default: the DATABASE_URL variable)' },
  json: { type: 'boolean', help: '--json          Print the leases as JSON, the entries listLeases() returns' },
} as const

interface Command {
  summary: string
  options: OptionName[]
  details: string
  run(values: Values, io: Io): Promise<void>
}

interface Values {
  table: string
  url?: string
  json?: boolean
}

interface Io {
  env: NodeJS.ProcessEnv
  out(text: string): void
  paint: Paint
}

/** An error that ends the command with one line on stderr and an exit code. */
class Exit extends Error {
  constructor(
    message: string,
    readonly code: 1 | 2,
  ) {
    super(message)
  }
}

const usage = (message: string) => new Exit(message, 2)

const COMMANDS: Record<string, Command> = {
  sql: {
    summary: 'Print the CREATE TABLE statement for the lease table',
    options: ['table'],
    details:
      'Prints the DDL for a migration tool or psql; it does not connect to a database.\n\n' +
      'Examples:\n' +
      `  ${BIN} sql > migrations/001_cron_leases.sql\n` +
      `  ${BIN} sql --table jobs.cron_leases | psql "$DATABASE_URL"`,
    async run(values, io) {
      io.out(createTableSql(values.table))
    },
  },
  migrate: {
    summary: 'Create the lease table, or upgrade an older one (safe to run again, and at once)',
    options: ['table', 'url'],
    details:
      'Creates the table if it does not exist, then adds the columns for outcomes, intervals and\n' +
      'pauses if they are missing (what upgradeTableSql() does); a table that is up to date is left\n' +
      'as it is, and needs no CREATE or ALTER privilege. Many replicas may run it at the same time.\n' +
      'The schema of a schema.name table must already exist.\n\n' +
      'Examples:\n' +
      `  ${BIN} migrate --url postgres://app@db.internal:5432/app\n` +
      `  DATABASE_URL=postgres://localhost/app ${BIN} migrate --table jobs.cron_leases`,
    async run(values, io) {
      const target = connectionTarget(values, io.env)
      const { before, after } = await withClient(target, values, 'migrate', async (client) => {
        const before = await columnCount(client, values.table)
        await client.query(createTableSql(values.table))
        await client.query(upgradeTableSql(values.table))
        return { before, after: (await columnCount(client, values.table)) ?? 0 }
      })
      const { table } = values
      io.out(
        before === null
          ? `${io.paint.green('Created')} table ${table} in ${target.label}.\n`
          : after > before
            ? `${io.paint.green('Upgraded')} table ${table} in ${target.label}: added ${after - before} columns for outcomes, intervals and pauses.\n`
            : `Table ${table} already exists in ${target.label} and is up to date; nothing to do.\n`,
      )
    },
  },
  status: {
    summary: 'Show every lease: its holder, when it was claimed, when it expires',
    options: ['table', 'url', 'json'],
    details:
      "Times are judged by the database clock, in one reading for all rows; this machine's clock\n" +
      'plays no part. With --json the output is an array of { jobName, holder, claimedAt,\n' +
      'leaseUntil, held, remainingMs, checkedAt } ordered by job name.\n\n' +
      'Examples:\n' +
      `  ${BIN} status --url postgres://app@db.internal:5432/app\n` +
      `  ${BIN} status --json | jq '.[] | select(.held) | .jobName'`,
    async run(values, io) {
      const target = connectionTarget(values, io.env)
      const leases = await withClient(target, values, 'status', (client) => listLeases(client, { table: values.table }))
      io.out(values.json ? `${JSON.stringify(leases, null, 2)}\n` : renderStatus(leases, values.table, io.paint))
    },
  },
}

const NAMES = Object.keys(COMMANDS)

function mainHelp(): string {
  const width = Math.max(...NAMES.map((n) => n.length)) + 3
  return [
    `Usage: ${BIN} <command> [options]`,
    '',
    'Inspect and set up the lease table of pg-cron-lease.',
    '',
    'Commands:',
    ...NAMES.map((name) => `  ${name.padEnd(width)}${COMMANDS[name]!.summary}`),
    '',
    'Options:',
    ...Object.values(OPTIONS).map((o) => `  ${o.help}`),
    '  -h, --help      Show help; for one command: pg-cron-lease <command> --help',
    '  -v, --version   Print the version',
    '',
    'Exit codes: 0 success, 1 database error, 2 usage error. NO_COLOR turns colours off.',
    '',
  ].join('\n')
}

function commandHelp(name: string): string {
  const command = COMMANDS[name]!
  const synopsis = command.options.map((o) =>
    o === 'json' ? '[--json]' : `[--${o} <${o === 'url' ? 'url' : 'name'}>]`,
  )
  return [
    `Usage: ${BIN} ${name} ${synopsis.join(' ')}`,
    '',
    `${command.summary}.`,
    '',
    command.details,
    '',
    'Options:',
    ...command.options.map((o) => `  ${OPTIONS[o].help}`),
    '  -h, --help      Show this help',
    '',
  ].join('\n')
}

/** Runs one invocation and returns its exit code. */
async function main(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const io: Io = { env, out: (text) => void process.stdout.write(text), paint: painter(process.stdout, env) }
  try {
    return await dispatch(args, io)
  } catch (error) {
    const exit = error instanceof Exit ? error : new Exit(`unexpected error: ${oneLine(error)}`, 1)
    process.stderr.write(`${painter(process.stderr, env).red(`${BIN}:`)} ${exit.message}\n`)
    return exit.code
  }
}

async function dispatch(args: string[], io: Io): Promise<number> {
  const [first, ...rest] = args
  if (first === undefined) {
    process.stderr.write(mainHelp())
    return 2
  }
  if (first === '-h' || first === '--help' || (first === 'help' && rest.length === 0)) {
    io.out(mainHelp())
    return 0
  }
  if (first === '-v' || first === '--version') {
    io.out(`${version()}\n`)
    return 0
  }
  if (first.startsWith('-')) throw usage(`expected a command (${NAMES.join(', ')}) before ${first}; see ${BIN} --help`)
  const name = first === 'help' ? rest[0]! : first
  if (!Object.hasOwn(COMMANDS, name)) throw unknownCommand(name)
  // Help wins over anything else on the line, so `status --bogus --help` still helps.
  if (first === 'help' || rest.some((a) => a === '-h' || a === '--help')) {
    io.out(commandHelp(name))
    return 0
  }
  const command = COMMANDS[name]!
  await command.run(parseOptions(name, command, rest), io)
  return 0
}

function unknownCommand(name: string): Exit {
  return usage(`unknown command ${JSON.stringify(name)}: expected ${NAMES.join(', ')}; see ${BIN} --help`)
}

function parseOptions(name: string, command: Command, args: string[]): Values {
  const options: Record<string, { type: 'string' | 'boolean' }> = {}
  for (const o of command.options) options[o] = { type: OPTIONS[o].type }
  let values: Record<string, string | boolean | undefined>
  try {
    ;({ values } = parseArgs({ args, options, strict: true, allowPositionals: false }))
  } catch (error) {
    throw usage(`${describeParseError(error, name)}; see ${BIN} ${name} --help`)
  }
  let table: string
  try {
    table = checkTable(values.table, '--table')
  } catch (error) {
    throw usage(oneLine(error).replace(/^pg-cron-lease: /, ''))
  }
  const result: Values = { table }
  if (typeof values.url === 'string') result.url = values.url
  if (values.json === true) result.json = true
  return result
}

// parseArgs' own messages suggest `--` tricks that make no sense here; say it plainly instead.
function describeParseError(error: unknown, command: string): string {
  const { code, message } = error as { code?: string; message?: string }
  const quoted = /'([^']*)'/.exec(message ?? '')?.[1] ?? ''
  switch (code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${quoted} for ${command}`
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      return `${quoted.split(' ')[0]} ${/argument missing/.test(message ?? '') ? 'needs a value' : 'takes no value'}`
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument ${JSON.stringify(quoted)}`
    default:
      return oneLine(error)
  }
}

interface Target {
  url: string
  /** host:port/database, for messages; never the password. */
  label: string
}

function connectionTarget(values: Values, env: NodeJS.ProcessEnv): Target {
  const source = values.url !== undefined ? '--url' : 'DATABASE_URL'
  const url = values.url ?? env.DATABASE_URL
  if (url === undefined || url === '') {
    throw usage('no database to connect to: pass --url postgres://user:password@host:5432/db or set DATABASE_URL')
  }
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw usage(`${source} is not a URL; expected postgres://user:password@host:5432/db`)
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw usage(`${source} must start with postgres:// or postgresql://, got ${parsed.protocol}//…`)
  }
  // Every part pg decodes is decoded here first, only so a malformed one is a usage error.
  const user = decodePart(parsed.username, 'user name', source)
  decodePart(parsed.password, 'password', source)
  decodePart(parsed.hostname, 'host', source)
  const database = decodePart(parsed.pathname.slice(1), 'database name', source)
  decodePart(parsed.search, 'parameters', source)
  const host = parsed.hostname || parsed.searchParams.get('host') || 'localhost'
  return { url, label: `${host}:${parsed.port || '5432'}/${database || user || 'postgres'}` }
}

// pg fails on some malformed escapes with a bare "URI malformed"; on others it re-encodes the whole
// URL, which turns other escapes in it (%3A in a password) into literal text. Say which part is
// wrong instead, without showing it.
function decodePart(text: string, part: string, source: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    throw usage(
      `${source} has a malformed percent-encoding in its ${part}: each % must start an escape of UTF-8 bytes such as %40; write a literal % as %25`,
    )
  }
}

/** The table's number of columns, or null when it does not exist. */
async function columnCount(client: pg.Client, table: string): Promise<number | null> {
  const { rows } = await client.query(
    'SELECT (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped)::int AS n, to_regclass($1) IS NULL AS missing',
    [quoteTable(table)],
  )
  return rows[0].missing ? null : rows[0].n
}

async function loadPg(): Promise<typeof pg> {
  try {
    return (await import('pg')).default
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string }
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && /'pg'/.test(message ?? '')) {
      throw new Exit(
        `the "pg" package is not installed, and this command needs it to reach the database: run npm install pg (the sql command works without it)`,
        1,
      )
    }
    throw error
  }
}

async function withClient<T>(
  target: Target,
  values: Values,
  command: string,
  work: (client: pg.Client) => Promise<T>,
): Promise<T> {
  const { Client } = await loadPg()
  const client = new Client({
    connectionString: target.url,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    application_name: BIN,
  })
  // A connection lost mid-query rejects that query; without a listener the same event would
  // also crash the process with a stack trace.
  client.on('error', () => {})
  try {
    await client.connect()
  } catch (error) {
    throw new Exit(explain(error, target, values, command), 1)
  }
  try {
    return await work(client)
  } catch (error) {
    throw new Exit(explain(error, target, values, command), 1)
  } finally {
    await client.end().catch(() => {})
  }
}

/** One line that says what went wrong and what to do about it. */
function explain(error: unknown, target: Target, values: Values, command: string): string {
  const code = (error as { code?: unknown })?.code
  const said = oneLine(error)
  const where = target.label
  const migrate = `${BIN} migrate${values.table === DEFAULT_TABLE ? '' : ` --table ${values.table}`}`
  switch (code) {
    case 'ECONNREFUSED':
      return `cannot connect to ${where}: connection refused; check that Postgres runs there and that --url or DATABASE_URL names the right host and port`
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `cannot connect to ${where}: the host name does not resolve; check the host in --url or DATABASE_URL`
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `cannot connect to ${where}: ${code}; check the host and port in --url or DATABASE_URL, and that the network lets you through`
    case '28P01':
    case '28000':
      return `cannot log in to ${where}: ${said}; check the user and password in --url or DATABASE_URL`
    case '3D000':
      return `cannot connect to ${where}: ${said}; check the database name in --url or DATABASE_URL`
    case '42P01':
      return `the lease table ${values.table} does not exist in ${where}; create it with: ${migrate} (same --url)`
    case '3F000':
      return `${said}, so ${values.table} cannot be created; create the schema first (CREATE SCHEMA ...) or choose another --table`
    case '42501':
      return `${said} in ${where}; connect as a role that may ${command === 'migrate' ? 'create the table' : 'read the table'}`
    case '42703':
      return `${values.table} in ${where} is not a pg-cron-lease table (${said}); check --table`
  }
  if (/timeout/i.test(said)) {
    return `cannot connect to ${where}: no answer within ${CONNECT_TIMEOUT_MS / 1000} s; check the host and port in --url or DATABASE_URL`
  }
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code))
    return `the database refused ${command}: ${said} (SQLSTATE ${code})`
  return `${command} failed against ${where}: ${said}`
}

function oneLine(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error)
  return message.replace(/\s*\n\s*/g, ' ').trim() || String((error as { code?: unknown })?.code ?? 'unknown error')
}

function version(): string {
  // dist/cli.mjs and src/cli.ts both sit one level below package.json.
  return JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version
}

function renderStatus(leases: LeaseInfo[], table: string, paint: Paint): string {
  if (leases.length === 0) return `No leases in ${table} yet: a job appears after its first claim.\n`
  const checked = leases[0]!.checkedAt
  const held = leases.filter((l) => l.held).length
  const rows = leases.map((l) => {
    // Ages come from two database timestamps (the claim and the check), never from this clock.
    const at = Date.parse(checked)
    const expires = l.held
      ? { text: `in ${span(l.remainingMs)}`, paint: paint.green }
      : { text: `expired ${ago(at - Date.parse(l.leaseUntil))}`, paint: paint.dim }
    return [
      // Names are shown escaped, and the columns measured on what is shown: a raw control
      // character could recolour the terminal or, as a line break, forge a row.
      { text: escapeControls(l.jobName), paint: paint.plain },
      { text: l.holder === null ? '-' : escapeControls(l.holder), paint: paint.plain },
      { text: ago(at - Date.parse(l.claimedAt)), paint: paint.plain },
      expires,
    ]
  })
  const header = ['JOB', 'HOLDER', 'CLAIMED', 'EXPIRES']
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.text.length)))
  const line = (cells: { text: string; paint: (s: string) => string }[]) =>
    cells
      .map((c, i) => c.paint(i === cells.length - 1 ? c.text : c.text.padEnd(widths[i]!)))
      .join('   ')
      .trimEnd()
  const jobs = `${leases.length} job${leases.length === 1 ? '' : 's'}, ${held} held`
  return [
    `${table}: ${jobs} (database clock ${checked})`,
    '',
    line(header.map((h) => ({ text: h, paint: paint.bold }))),
    ...rows.map(line),
    '',
  ].join('\n')
}

/** A duration, rounded down to its largest whole unit: "12 s", "3 min", "5 h", "2 d". */
function span(ms: number): string {
  const s = Math.floor(Math.max(0, ms) / 1000)
  if (s < 1) return 'less than 1 s'
  if (s < 60) return `${s} s`
  const min = Math.floor(s / 60)
  if (min < 60) return `${min} min`
  const h = Math.floor(min / 60)
  return h < 48 ? `${h} h` : `${Math.floor(h / 24)} d`
}

function ago(ms: number): string {
  return ms < 1000 ? 'just now' : `${span(ms)} ago`
}

interface Paint {
  plain(text: string): string
  bold(text: string): string
  dim(text: string): string
  red(text: string): string
  green(text: string): string
}

/**
 * Colours only on a terminal, or when FORCE_COLOR asks for them; NO_COLOR (any non-empty value)
 * turns them off in every case (https://no-color.org).
 */
function painter(stream: NodeJS.WriteStream, env: NodeJS.ProcessEnv): Paint {
  const force = env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '0' && env.FORCE_COLOR !== 'false'
  const on = !env.NO_COLOR && (force || stream.isTTY === true)
  const sgr = (open: number, close: number) => (text: string) => (on ? `\x1b[${open}m${text}\x1b[${close}m` : text)
  return { plain: (t) => t, bold: sgr(1, 22), dim: sgr(2, 22), red: sgr(31, 39), green: sgr(32, 39) }
}

// `status | head` closes the pipe early; that is not an error worth a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0)
  throw error
})

process.exitCode = await main(process.argv.slice(2), process.env)
