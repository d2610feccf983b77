/** `pg-cron-lease exec`: runs a command once per occurrence of a schedule, on whichever host claims it first. */
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { duration } from '../human.js'
import { withCronLease } from '../lease.js'
import type { LeaseContext } from '../types.js'
import { BIN, type Command } from './args.js'
import { CommandFailed, runCommand } from './exec-child.js'
import { KILL_AFTER_MS, nearestSlot, readPlan } from './exec-schedule.js'

export const exec: Command = {
  summary: 'Run a command once per occurrence of a schedule, on one host of many (crontab, systemd, Kubernetes)',
  synopsis:
    '--job <name> (--cron <expr> [--tz <zone>] | --every <duration>) [--lease <duration>] [--within <duration>]\n' +
    '       [--kill-after <duration>] [--skipped-exit <n>] [--url <url>] [--table <name>] -- COMMAND [ARG...]',
  options: ['job', 'cron', 'tz', 'every', 'lease', 'within', 'kill-after', 'skipped-exit', 'url', 'table'],
  argv: true,
  optionHelp: { job: 'The job: its lease, its history and its name in check, history and the dashboard' },
  details:
    'Start it on every host at each slot (cron, a systemd timer, a Kubernetes CronJob): one host runs\n' +
    'COMMAND, the others exit at once. The slot is the one nearest the database clock, read once; a\n' +
    'fire before it waits for it, and a fire further than --within runs nothing and counts as missed.\n' +
    '--cron is read in UTC unless --tz says otherwise; --every slots are whole multiples of it since\n' +
    '1970-01-01T00:00Z. COMMAND gets this stdin, stdout, stderr and environment, plus PG_CRON_LEASE_JOB\n' +
    'and PG_CRON_LEASE_OCCURRENCE (ISO-8601 UTC). Its lease is kept alive, fenced, while it runs, and\n' +
    'SIGTERM and SIGINT are passed on; if the lease is lost all the same, it gets SIGTERM, then SIGKILL\n' +
    `after --kill-after (default ${duration(KILL_AFTER_MS)}). Its run is recorded: ok on exit 0, else error with the exit\n` +
    'code or signal and the last line of stderr. See docs/exec.md.\n\n' +
    'Examples:\n' +
    `  ${BIN} exec --job backup --cron "30 2 * * *" --tz Europe/Berlin -- /usr/local/bin/backup\n` +
    `  ${BIN} exec --job reindex --every 15m --lease 1h -- psql -c "REINDEX TABLE orders"`,
  exitCodes:
    "COMMAND's own when it ran (128 + n for signal n), 0 when another host had the slot, it was outside\n" +
    '--within or the job is paused (or --skipped-exit), 1 the database or the claim failed (or pg, or croner\n' +
    'for --cron, is missing), 2 usage error, 127 COMMAND cannot be started (recorded as an error)',
  async run(values, context) {
    const { job, schedule, leaseMs, withinMs } = await readPlan(values, Date.now())
    const skippedExit = values.skippedExit ?? 0
    return context.connect(async (client) => {
      const clock = await databaseClock(client)
      const nearest = nearestSlot(schedule, clock.nowMs)
      const offMs = Math.abs(clock.nowMs - (nearest?.slot ?? Number.NEGATIVE_INFINITY))
      if (nearest === null || offMs > withinMs) {
        context.note(
          `${BIN}: exec ${job}: the database clock reads ${iso(clock.nowMs)}, ${duration(offMs)} from the nearest slot, ` +
            `outside --within ${duration(withinMs)}: the command was not started, and the slot counts as missed\n`,
        )
        return skippedExit
      }
      // The claim refuses an occurrence ahead of the database clock: a fire before its slot waits for it.
      const early = nearest.slot - clock.nowAt()
      if (early > 0) await sleep(early)
      const env = { ...context.env, PG_CRON_LEASE_JOB: job, PG_CRON_LEASE_OCCURRENCE: iso(nearest.slot) }
      const killAfterMs = values.killAfterMs ?? KILL_AFTER_MS
      // Registered on globalThis by an OpenTelemetry SDK preloaded into this process; never loaded without one.
      const otel = OTEL in globalThis ? await import('@opentelemetry/api').catch(() => undefined) : undefined
      const run = (ctx: LeaseContext) => {
        otel?.propagation.inject(otel.context.active(), env, ENV_CARRIER)
        return runCommand(values.argv!, { env, signal: ctx.signal, killAfterMs, stderr: context.note })
      }
      const outcome = await withCronLease(client, job, leaseMs, run, {
        table: values.table,
        occurrence: new Date(nearest.slot),
        // Stored as the next due time: a slot nobody claims is then counted as missed by the next claim.
        nextOccurrence: nearest.next === null ? null : new Date(nearest.next),
        keepAlive: { beatMs: Math.max(1, Math.floor(leaseMs / 3)), extendMs: leaseMs },
        logger: { warn: (message) => context.note(`${message}\n`) },
      }).catch((error: unknown) => (error instanceof CommandFailed ? error : Promise.reject(error)))
      return outcome instanceof CommandFailed ? outcome.exitCode : outcome.ran ? 0 : skippedExit
    })
  },
}

// One round trip; its midpoint is taken as the moment the database read its clock (± half of it).
async function databaseClock(client: pg.Client) {
  const sentAt = performance.now()
  const { rows } = await client.query<{ now: Date }>('SELECT clock_timestamp() AS now')
  const readAt = (sentAt + performance.now()) / 2
  const nowMs = rows[0]!.now.getTime()
  return { nowMs, nowAt: () => nowMs + (performance.now() - readAt) }
}

const iso = (ms: number) => new Date(ms).toISOString()
const OTEL = Symbol.for('opentelemetry.js.api.1')
// The run's span, current in the tick, reaches the command as OpenTelemetry's environment carriers name it.
const ENV_CARRIER = {
  set: (env: NodeJS.ProcessEnv, key: string, value: string) => Object.assign(env, { [envName(key)]: value }),
}
const envName = (key: string) => key.toUpperCase().replace(/[^A-Z0-9_]/g, '_')
