/** `pg-cron-lease exec`: runs a command once per occurrence of a schedule, on whichever host claims it first. */
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { withCronLease } from '../lease.js'
import { BIN, type Command } from './args.js'
import { CommandFailed, runCommand } from './exec-child.js'
import { KILL_AFTER_MS, nearestSlot, readPlan } from './exec-schedule.js'
import { duration } from './human.js'

export const exec: Command = {
  summary: 'Run a command once per occurrence of a schedule, on one host of many (crontab, systemd, Kubernetes)',
  synopsis:
    '--job <name> (--cron <expr> [--tz <zone>] | --every <duration>) [--lease <duration>] [--within <duration>]\n' +
    '       [--kill-after <duration>] [--skipped-exit <n>] [--url <url>] [--table <name>] -- COMMAND [ARG...]',
  options: ['job', 'cron', 'tz', 'every', 'lease', 'within', 'kill-after', 'skipped-exit', 'url', 'table'],
  argv: true,
  optionHelp: { job: 'The job: its lease, its history and its name in check, history and the dashboard' },
  details:
    'Start it from every host at each slot of the schedule (cron, a systemd timer, a Kubernetes\n' +
    'CronJob): one of them runs COMMAND, the others exit at once without starting it.\n\n' +
    "The slot comes from the schedule and the database clock, never this host's: it is the slot\n" +
    'nearest to the database clock, read once. A fire before its slot waits for it, by the database\n' +
    'clock; a fire further than --within from it runs nothing, says so on stderr and counts as a\n' +
    'missed occurrence. --cron is read in UTC unless --tz says otherwise; --every slots are whole\n' +
    'multiples of the interval since 1970-01-01T00:00Z (--every 1d is midnight UTC).\n\n' +
    'COMMAND runs with this stdin, stdout, stderr and environment, plus PG_CRON_LEASE_JOB and\n' +
    'PG_CRON_LEASE_OCCURRENCE (the slot, ISO-8601 UTC). While it runs, the lease is kept alive,\n' +
    'fenced on this claim; SIGTERM and SIGINT are passed on to it. If the lease is lost all the same,\n' +
    `COMMAND gets SIGTERM, then SIGKILL after --kill-after (default ${duration(KILL_AFTER_MS)}). The run is recorded:\n` +
    'ok on exit 0, else error with the exit code or signal and the last line of stderr.\n\n' +
    'Examples:\n' +
    `  ${BIN} exec --job backup:nightly --cron "30 2 * * *" --tz Europe/Berlin -- /usr/local/bin/backup\n` +
    `  ${BIN} exec --job reindex --every 15m --lease 1h -- psql -c "REINDEX TABLE orders"`,
  exitCodes:
    "COMMAND's own when it ran (128 + n when signal n ended it), 0 when another host had the slot, it\n" +
    'was outside --within or the job is paused (or --skipped-exit), 1 the database cannot be reached\n' +
    'or the claim failed (or pg, or croner for --cron, is not installed), 2 usage error, 127 COMMAND\n' +
    'cannot be started (recorded as an error)',
  async run(values, context) {
    const plan = await readPlan(values, Date.now())
    const { job, argv, leaseMs } = plan
    return context.connect(async (client) => {
      const clock = await databaseClock(client)
      const nearest = nearestSlot(plan.schedule, clock.nowMs)
      const offMs = nearest === null ? Number.POSITIVE_INFINITY : clock.nowMs - nearest.slot
      if (nearest === null || Math.abs(offMs) > plan.withinMs) {
        const where =
          nearest === null ? 'no slot' : `${duration(Math.abs(offMs))} from its nearest slot, ${iso(nearest.slot)}`
        context.note(
          `${BIN}: exec ${job}: the database clock reads ${iso(clock.nowMs)}, ${where}, outside --within ` +
            `${duration(plan.withinMs)}: the command was not started, and the slot counts as missed\n`,
        )
        return plan.skippedExit
      }
      // The claim refuses an occurrence ahead of the database clock: a fire before its slot waits for it.
      const early = nearest.slot - clock.nowAt()
      if (early > 0) await sleep(early)
      const env = { ...context.env, PG_CRON_LEASE_JOB: job, PG_CRON_LEASE_OCCURRENCE: iso(nearest.slot) }
      try {
        const outcome = await withCronLease(
          client,
          job,
          leaseMs,
          (ctx) => runCommand(argv, { env, signal: ctx.signal, killAfterMs: plan.killAfterMs, stderr: context.note }),
          {
            table: values.table,
            occurrence: new Date(nearest.slot),
            // Stored as the next due time: a slot nobody claims is then counted as missed by the next claim.
            nextOccurrence: nearest.next === null ? null : new Date(nearest.next),
            keepAlive: { beatMs: Math.max(1, Math.floor(leaseMs / 3)), extendMs: leaseMs },
            logger: { warn: (message) => context.note(`${message}\n`) },
          },
        )
        return outcome.ran ? 0 : plan.skippedExit
      } catch (error) {
        if (error instanceof CommandFailed) return error.exitCode
        throw error
      }
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
