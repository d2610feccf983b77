/** The command as a function, `main(argv, io)`, with all it touches in `io`; and its help, main and per command. */
import { existsSync, readFileSync } from 'node:fs'
import { oneLine } from '../format-value.js'
import { painter } from '../human.js'
import { BIN, type Command, EXIT, Exit, type ExitCode, flag, OPTIONS, parseOptions, readCommand } from './args.js'
import { type Connect, connectionTarget, withClient } from './connect.js'
import { dashboard } from './dashboard.js'
import { doctor } from './doctor.js'
import { exec } from './exec.js'
import { history } from './history.js'
import { pause, release, resume } from './job-actions.js'
import { migrate, sql } from './migrate.js'
import { check, status } from './status.js'

type Output = { write(text: string): unknown; isTTY?: boolean }

export interface CliIo {
  stdout: Output
  stderr: Output
  // DATABASE_URL, NO_COLOR and FORCE_COLOR are read from here.
  env: Readonly<Record<string, string | undefined>>
  connect?: Connect
}

// In the order the main help lists them.
const ALL = { sql, migrate, status, check, history, doctor, pause, resume, release, dashboard, exec }
export const COMMANDS: Readonly<Record<string, Command>> = ALL

const NAMES = Object.keys(COMMANDS)

/** Runs one invocation and resolves its exit code; never rejects, never exits the process. */
export async function main(argv: string[], io: CliIo): Promise<ExitCode | number> {
  const print = (text: string): ExitCode => {
    io.stdout.write(text)
    return EXIT.OK
  }
  const [first, ...rest] = argv
  try {
    if (first === undefined) {
      io.stderr.write(mainHelp())
      return EXIT.USAGE
    }
    if (first === '-h' || first === '--help' || (first === 'help' && rest.length === 0)) return print(mainHelp())
    if (first === '-v' || first === '--version') return print(`${version()}\n`)
    const { command: name, help } = readCommand(first, rest, NAMES)
    const command = COMMANDS[name]!
    if (help) return print(commandHelp(name, command))
    const values = parseOptions(name, command, rest)
    const code = await command.run(values, {
      out: print,
      note: (text) => io.stderr.write(text),
      paint: painter(io.stdout, io.env),
      env: io.env,
      connect(work) {
        const target = connectionTarget(values.url, io.env)
        return (io.connect ?? withClient)(target, { command: name, table: values.table }, (c) => work(c, target))
      },
    })
    return code ?? EXIT.OK
  } catch (error) {
    const exit = error instanceof Exit ? error : new Exit(`unexpected error: ${oneLine(error)}`, EXIT.FAILED)
    io.stderr.write(`${painter(io.stderr, io.env).red(`${BIN}:`)} ${exit.message}\n`)
    return exit.code
  }
}

function version(): string {
  // Bundled into dist/cli.mjs this code sits one level below package.json; as src/cli/main.ts, two.
  for (const up of ['../package.json', '../../package.json']) {
    const file = new URL(up, import.meta.url)
    if (!existsSync(file)) continue
    const manifest = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown }
    if (manifest.name === BIN && typeof manifest.version === 'string') return manifest.version
  }
  throw new Error(`cannot find the package.json of ${BIN}`)
}

function optionLines(rows: [string, string][]): string[] {
  const width = Math.max(...rows.map(([f]) => f.length)) + 2
  return rows.map(([f, help]) => `  ${f.padEnd(width)}${help}`)
}

function mainHelp(): string {
  const width = Math.max(...NAMES.map((n) => n.length)) + 3
  return [
    `Usage: ${BIN} <command> [options]`,
    '',
    'Set up, inspect and act on the lease table of pg-cron-lease.',
    '',
    'Commands:',
    ...NAMES.map((name) => `  ${name.padEnd(width)}${COMMANDS[name]!.summary}`),
    '',
    'Common options:',
    ...optionLines([
      [flag('table'), OPTIONS.table.help],
      [flag('url'), OPTIONS.url.help],
      ['-h, --help', `Show help; for one command and its own options: ${BIN} <command> --help`],
      ['-v, --version', 'Print the version'],
    ]),
    '',
    'Exit codes: 0 success, 1 database error, 2 usage error, 3 check found an unhealthy job.',
    'doctor exits 3 too, when one of its checks fails; exec exits with the code of the command it ran.',
    'An option may be given once; only --job repeats. NO_COLOR turns colours off.',
    '',
  ].join('\n')
}

function commandHelp(name: string, command: Command): string {
  const synopsis = command.options.flatMap((o) =>
    o === 'until' ? [] : o === 'for' ? '[--for <duration> | --until <iso>]' : `[${flag(o)}]${o === 'job' ? '...' : ''}`,
  )
  if (command.job) synopsis.unshift('<job>')
  return [
    `Usage: ${BIN} ${name} ${command.synopsis ?? synopsis.join(' ')}`,
    '',
    `${command.summary}.`,
    '',
    command.details,
    '',
    'Options:',
    ...optionLines([
      ...command.options.map((o): [string, string] => [flag(o), command.optionHelp?.[o] ?? OPTIONS[o].help]),
      ['-h, --help', 'Show this help'],
    ]),
    '',
    `Exit codes: ${command.exitCodes}.`,
    '',
  ].join('\n')
}
