/**
 * The help of `pg-cron-lease`: the main help, with every command and the common options, and one
 * command's help, with its synopsis, its details, its own options and its exit codes.
 */
import { BIN, flag, OPTIONS } from './args.js'
import type { Command } from './command.js'

function optionLines(rows: [string, string][]): string[] {
  const width = Math.max(...rows.map(([f]) => f.length)) + 2
  return rows.map(([f, help]) => `  ${f.padEnd(width)}${help}`)
}

/** What `pg-cron-lease --help` prints: every command in `commands`, in their order. */
export function mainHelp(commands: Readonly<Record<string, Command>>): string {
  const names = Object.keys(commands)
  const width = Math.max(...names.map((n) => n.length)) + 3
  return [
    `Usage: ${BIN} <command> [options]`,
    '',
    'Set up, inspect and act on the lease table of pg-cron-lease.',
    '',
    'Commands:',
    ...names.map((name) => `  ${name.padEnd(width)}${commands[name]!.summary}`),
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
    'An option may be given once; only --job repeats. NO_COLOR turns colours off.',
    '',
  ].join('\n')
}

/** What `pg-cron-lease <name> --help` prints. */
export function commandHelp(name: string, command: Command): string {
  const synopsis = [
    ...(command.job ? ['<job>'] : []),
    ...command.options.map((o) =>
      o === 'for'
        ? `[--for <duration> | --until <iso>]`
        : o === 'until'
          ? ''
          : `[${flag(o)}]${o === 'job' ? '...' : ''}`,
    ),
  ].filter(Boolean)
  return [
    `Usage: ${BIN} ${name} ${synopsis.join(' ')}`,
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
