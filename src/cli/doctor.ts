/** `pg-cron-lease doctor`: runDoctor's checks against --url and --table, as lines for people or as JSON. */
import { type DoctorCheck, runDoctor } from '../doctor.js'
import { escapeControls } from '../format-value.js'
import { jsonText, type Paint } from '../human.js'
import { BIN, type Command, DATABASE_EXIT, EXIT, type ExitCode, failed, usage } from './args.js'
import { openClient } from './connect.js'

export const doctor: Command = {
  summary: 'Check everything the guarantee depends on here, and prove it with a live race',
  options: ['table', 'url', 'format', 'race', 'rounds', 'no-race'],
  optionHelp: { format: 'text (default) or json (one object per check)' },
  details:
    'Checks, against the URL and table the application uses: connection (the server version),\n' +
    'writable (not a standby, not read-only), table (its shape, its history table), privileges,\n' +
    "clock (this host's against the database's), pooler (transaction pooling), prepared (named\n" +
    'statements), durability (synchronous_commit, a synchronous standby), timeouts, and race: --race\n' +
    'connections claim a job named pg-cron-lease:doctor:<random> for --rounds rounds, and every round\n' +
    'must have exactly one winner; then every row of that job is deleted, even on Ctrl-C or SIGTERM,\n' +
    'and no other row is touched. Each statement of the race waits at most 2 s for a lock. Each check\n' +
    'prints one line, ✓, ! (a warning) or ✗ (a failure), with what to do for ! and ✗; a summary line\n' +
    'ends the text. What it is doing goes to stderr. --no-race checks what a role that only reads\n' +
    '(a monitor) needs: SELECT on both tables; a role that cannot claim is then a warning.\n' +
    '--format json prints an array of { id, status, summary, detail, fix }, status pass, warn or fail.\n\n' +
    'Examples:\n' +
    `  ${BIN} doctor --url postgres://app@db.internal:5432/app\n` +
    `  ${BIN} doctor --no-race --url postgres://monitor@db.internal:5432/app\n` +
    `  ${BIN} doctor --format json | jq -r '.[] | select(.status != "pass") | .fix'`,
  exitCodes: `0 no check failed (warnings allowed), ${DATABASE_EXIT}, 2 usage error, 3 a check failed`,
  async run(values, context) {
    if (values.format === 'prometheus') throw usage('doctor prints --format text or json, not prometheus')
    const text = values.format === 'text'
    const checks = await context.connect(async (client, target) => {
      // A signal stops the race within a round, its rows deleted; a second one ends the process at once.
      const interrupt = new AbortController()
      const stop = () => {
        for (const signal of SIGNALS) process.off(signal, stop)
        interrupt.abort(failed('interrupted: the race stopped, and its rows were deleted'))
      }
      for (const signal of SIGNALS) process.once(signal, stop)
      try {
        return await runDoctor(client, {
          table: values.table,
          race: values.race,
          rounds: values.rounds,
          connect: () => openClient(target),
          signal: interrupt.signal,
          onProgress: (message) => text && context.note(`${BIN} doctor: ${message}…\n`),
        })
      } finally {
        for (const signal of SIGNALS) process.off(signal, stop)
      }
    })
    context.out(text ? renderDoctor(checks, context.paint) : jsonText(checks))
    return doctorExitCode(checks)
  },
}

const SIGNALS = ['SIGINT', 'SIGTERM'] as const

export function renderDoctor(checks: DoctorCheck[], paint: Paint): string {
  const mark = { pass: paint.green('✓'), warn: paint.yellow('!'), fail: paint.red('✗') }
  const lines = checks.map((c) => {
    const fix = c.fix === null ? '' : `; fix: ${escapeControls(c.fix)}`
    return `${mark[c.status]} ${c.id}: ${escapeControls(c.summary)}${fix}`
  })
  const n = (status: DoctorCheck['status']) => checks.filter((c) => c.status === status).length
  const summary = `${checks.length} checks: ${n('pass')} passed, ${n('warn')} warnings, ${n('fail')} failures`
  return `${[...lines, summary].join('\n')}\n`
}

export function doctorExitCode(checks: DoctorCheck[]): ExitCode {
  return checks.some((c) => c.status === 'fail') ? EXIT.UNHEALTHY : EXIT.OK
}
