#!/usr/bin/env node
/**
 * The `pg-cron-lease` command: print or apply the DDL, show and check the jobs in the lease table,
 * and pause, resume or release one job. This file reads the command line and dispatches; each
 * output and action lives in src/cli/.
 *
 * Exit codes: 0 success, 1 the database (or the `pg` driver) could not do it, 2 a usage error, 3
 * `check` found a job unhealthy. Every error is one line on stderr that says what to do; no stack
 * trace. The URL is never printed with its password, because it usually carries one.
 */
import { readFileSync } from 'node:fs'
import type pg from 'pg'
import { type JobAction, runJobAction } from './cli/admin.js'
import { checkJobs, renderCheck } from './cli/check.js'
import { connectionTarget, withClient } from './cli/connect.js'
import { Exit, oneLine, usage } from './cli/exit.js'
import { type Accepts, flag, OPTIONS, type OptionName, parseOptions, type Values } from './cli/options.js'
import { type Paint, painter } from './cli/paint.js'
import { renderPrometheus } from './cli/prometheus.js'
import { renderStatus } from './cli/status-text.js'
import { listLeases } from './list-leases.js'
import { clockSql, createTableSql, quoteTable, upgradeTableSql } from './sql.js'

const BIN = 'pg-cron-lease'

interface Io {
  env: NodeJS.ProcessEnv
  out(text: string): void
  paint: Paint
}

interface Command extends Accepts {
  summary: string
  /** Help for an option where this command's differs from the one in OPTIONS. */
  optionHelp?: Partial<Record<OptionName, string>>
  details: string
  exitCodes: string
  /** Resolves the exit code. */
  run(values: Values, io: Io): Promise<number>
}

const DATABASE_EXIT = '1 the database cannot be reached or read (or pg is not installed)'

const COMMANDS: Record<string, Command> = {
  sql: {
    summary: 'Print the CREATE TABLE statement for the lease table',
    options: ['table'],
    details:
      'Prints the DDL for a migration tool or psql; it does not connect to a database.\n\n' +
      'Examples:\n' +
      `  ${BIN} sql > migrations/001_cron_leases.sql\n` +
      `  ${BIN} sql --table jobs.cron_leases | psql "$DATABASE_URL"`,
    exitCodes: '0 printed, 2 usage error',
    async run(values, io) {
      io.out(createTableSql(values.table))
      return 0
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
    exitCodes: `0 created, upgraded or already up to date, ${DATABASE_EXIT}, 2 usage error`,
    async run(values, io) {
      const target = connectionTarget(values.url, io.env)
      const { before, after } = await withClient(
        target,
        { command: 'migrate', table: values.table },
        async (client) => {
          const before = await columnCount(client, values.table)
          await client.query(createTableSql(values.table))
          await client.query(upgradeTableSql(values.table))
          return { before, after: (await columnCount(client, values.table)) ?? 0 }
        },
      )
      const { table } = values
      io.out(
        before === null
          ? `${io.paint.green('Created')} table ${table} in ${target.label}.\n`
          : after > before
            ? `${io.paint.green('Upgraded')} table ${table} in ${target.label}: added ${after - before} columns for outcomes, intervals and pauses.\n`
            : `Table ${table} already exists in ${target.label} and is up to date; nothing to do.\n`,
      )
      return 0
    },
  },
  status: {
    summary: 'Show every job: its lease, its last run, and whether it is failing, overdue or paused',
    options: ['table', 'url', 'format', 'json', 'overdue-factor'],
    optionHelp: { json: 'The same as --format json' },
    details:
      'Per job: the holder, when it was claimed, when its lease expires, how its last run ended\n' +
      '(LAST RUN) and how long it took (TOOK), and STATE: FAILING (its last run failed), OVERDUE (not\n' +
      'claimed for its interval × the overdue factor, and not paused) or PAUSED. Ages are differences\n' +
      "of two database timestamps read in one statement; this machine's clock plays no part. Job\n" +
      'names, holders and errors are printed with control characters and backslashes escaped\n' +
      '(\\n, \\x1b, \\\\).\n\n' +
      '--format json prints the array listLeases() returns, ordered by job name: jobName, holder,\n' +
      'claimedAt, leaseUntil, held, remainingMs, checkedAt, lastOutcome, lastFinishedAt,\n' +
      'lastDurationMs, lastError, lastSuccessAt, everyMs, overdue, paused, pausedUntil. Timestamps are\n' +
      'ISO-8601 UTC text with microseconds; under an open-ended pause leaseUntil and pausedUntil are\n' +
      '"infinity" and remainingMs is null (JSON has no Infinity).\n\n' +
      '--format prometheus prints gauges in the Prometheus text format 0.0.4, ending with # EOF so it\n' +
      "is valid OpenMetrics too; node_exporter's textfile collector reads it. Per job_name label:\n" +
      'pg_cron_lease_held, _last_claim_age_seconds, _last_success_age_seconds, _last_duration_seconds,\n' +
      '_last_outcome_ok, _interval_seconds, _overdue, _paused; a value not known yet is left out.\n\n' +
      'Examples:\n' +
      `  ${BIN} status --url postgres://app@db.internal:5432/app\n` +
      `  ${BIN} status --json | jq -r '.[] | select(.lastOutcome == "error") | .jobName'\n` +
      `  ${BIN} status --format prometheus > /var/lib/node_exporter/textfile/pg_cron_lease.prom.$$ &&\n` +
      '    mv /var/lib/node_exporter/textfile/pg_cron_lease.prom.$$ /var/lib/node_exporter/textfile/pg_cron_lease.prom',
    exitCodes: `0 printed, ${DATABASE_EXIT}, 2 usage error`,
    async run(values, io) {
      const target = connectionTarget(values.url, io.env)
      const leases = await withClient(target, { command: 'status', table: values.table }, (client) =>
        listLeases(client, { table: values.table, overdueFactor: values.overdueFactor }),
      )
      const render = {
        text: () => renderStatus(leases, values.table, io.paint),
        json: () => `${JSON.stringify(leases, null, 2)}\n`,
        prometheus: () => renderPrometheus(leases),
      }
      io.out(render[values.format]())
      return 0
    },
  },
  check: {
    summary: 'Exit 3 when a job is overdue or its last run failed, for monitors and probes',
    options: ['table', 'url', 'job', 'json', 'overdue-factor'],
    optionHelp: { json: 'Print the verdict as JSON (the exit code is the same)' },
    details:
      'Checks every job in the table, or only those named with --job. A job is unhealthy when:\n' +
      '  OVERDUE        it has not been claimed for its interval × the overdue factor;\n' +
      '  FAILING        its last recorded run failed (until a run ends ok);\n' +
      '  NEVER CLAIMED  it was named with --job but has no row: never claimed, or a typo.\n' +
      'A paused job is never overdue, but a paused job whose last run failed is still FAILING:\n' +
      'pausing does not fix it. With no job unhealthy it prints one OK line and exits 0; otherwise\n' +
      'one line per unhealthy job, saying which and why, and exits 3. Ages come from the database\n' +
      'clock. --json prints { healthy, checkedAt, table, overdueFactor, jobs: [{ jobName, healthy,\n' +
      'neverClaimed, overdue, failing, paused, reason }] } with the same exit codes.\n\n' +
      'Examples:\n' +
      `  ${BIN} check --job billing:hourly --job report:daily\n` +
      `  ${BIN} check --json --overdue-factor 3 | jq '.jobs[] | select(.healthy | not)'`,
    exitCodes: `0 every job is healthy, ${DATABASE_EXIT}, 2 usage error, 3 a job is overdue, failing or never claimed`,
    async run(values, io) {
      const target = connectionTarget(values.url, io.env)
      const { table, overdueFactor, jobs } = values
      const result = await withClient(target, { command: 'check', table }, async (client) => {
        const leases = await listLeases(client, { table, overdueFactor })
        // An empty table carries no clock reading of its own.
        const checkedAt: string = leases[0]?.checkedAt ?? (await client.query(clockSql())).rows[0].checked_at
        return checkJobs({ leases, jobs, table, overdueFactor, checkedAt })
      })
      io.out(values.format === 'json' ? `${JSON.stringify(result, null, 2)}\n` : renderCheck(result))
      return result.healthy ? 0 : 3
    },
  },
  pause: jobCommand(
    'pause',
    'Pause one job on every replica, for a while or until resumed',
    'No claim of the job succeeds until the pause ends: with --for after that long, with --until at\n' +
      'that instant, with neither when resumed. Times are by the database clock: --until must be in\n' +
      'its future (and no later than 9999-12-31T23:59:59.999Z), and a --for that ends after the year\n' +
      '9999 pauses until resumed. A tick running at that moment is not stopped, but its renew and\n' +
      'keep-alive beats fail and its ctx.signal aborts. A paused job is never overdue for check, but\n' +
      `still FAILING if its last run failed. Needs the columns ${BIN} migrate adds.\n\n` +
      'Examples:\n' +
      `  ${BIN} pause billing:hourly --for 2h\n` +
      `  ${BIN} pause billing:hourly --until 2026-12-01T06:00:00Z\n` +
      `  ${BIN} pause billing:hourly`,
  ),
  resume: jobCommand(
    'resume',
    'End the pause of one job: the next claim on any replica runs it',
    'Ends the pause at once; a pause that already ran out is only cleared. A job that is not\n' +
      'paused, by the database clock, is said to be so; nothing changes, and it exits 0. Needs the\n' +
      `columns ${BIN} migrate adds.\n\n` +
      'Example:\n' +
      `  ${BIN} resume billing:hourly`,
  ),
  release: jobCommand(
    'release',
    "End one job's current lease now, for a holder that crashed with a long lease",
    'The next claim, on any replica, runs the job. A tick that is in fact still running is not\n' +
      'stopped, but its renew and keep-alive beats fail and its ctx.signal aborts. A pause stays in\n' +
      'force: the lease then ends when the pause does.\n\n' +
      'Example:\n' +
      `  ${BIN} release import:nightly`,
  ),
}

function jobCommand(action: JobAction, summary: string, details: string): Command {
  return {
    summary,
    options: action === 'pause' ? ['for', 'until', 'table', 'url'] : ['table', 'url'],
    job: true,
    details:
      'Changes only the row of <job>, by one statement, and prints what changed by the database clock.\n' +
      `${details}\n\nA job name that starts with a dash goes after --: ${BIN} ${action} -- -name`,
    exitCodes: `${action === 'resume' ? '0 resumed, or the job was not paused and nothing changed' : '0 changed'}, 1 the job has no row (never claimed, or a typo) or the database cannot be reached, 2 usage error`,
    async run(values, io) {
      const target = connectionTarget(values.url, io.env)
      const { table } = values
      const message = await withClient(target, { command: action, table }, (client) =>
        runJobAction(client, {
          action,
          jobName: values.job!,
          table,
          where: target.label,
          ...(values.forMs !== undefined && { forMs: values.forMs }),
          ...(values.until !== undefined && { until: values.until }),
        }),
      )
      io.out(message)
      return 0
    },
  }
}

const NAMES = Object.keys(COMMANDS)

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
    'An option may be given once; only --job repeats. NO_COLOR turns colours off.',
    '',
  ].join('\n')
}

function commandHelp(name: string): string {
  const command = COMMANDS[name]!
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
  // Help wins over anything else on the line, so `status --bogus --help` still helps; after `--`
  // a --help is a job's name.
  const options = rest.indexOf('--') === -1 ? rest : rest.slice(0, rest.indexOf('--'))
  if (first === 'help' || options.some((a) => a === '-h' || a === '--help')) {
    io.out(commandHelp(name))
    return 0
  }
  const command = COMMANDS[name]!
  return command.run(parseOptions(name, command, rest), io)
}

function unknownCommand(name: string): Exit {
  return usage(`unknown command ${JSON.stringify(name)}: expected ${NAMES.join(', ')}; see ${BIN} --help`)
}

/** The table's number of columns, or null when it does not exist. */
async function columnCount(client: pg.Client, table: string): Promise<number | null> {
  const { rows } = await client.query(
    'SELECT (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped)::int AS n, to_regclass($1) IS NULL AS missing',
    [quoteTable(table)],
  )
  return rows[0].missing ? null : rows[0].n
}

function version(): string {
  // dist/cli.mjs and src/cli.ts both sit one level below package.json.
  return JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version
}

// `status | head` closes the pipe early; that is not an error worth a stack trace.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0)
  throw error
})

process.exitCode = await main(process.argv.slice(2), process.env)
