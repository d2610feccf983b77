/**
 * `pg-cron-lease exec` without a database: which slot a fire is for (epoch multiples for --every,
 * croner for --cron, on Europe/Berlin's DST days), and every argument refused with exit 2 and one
 * line naming it, before any connection is made. The processes against a real database are
 * test/integration/cli/exec.test.ts.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { Cron } from 'croner'
import { Exit } from '../../src/cli/args.ts'
import { cronSchedule, everySchedule, nearestSlot, readPlan } from '../../src/cli/exec-schedule.ts'
import { type CliIo, main } from '../../src/cli/main.ts'
import { LEASE } from '../../src/presets.ts'

const at = (text: string) => Date.parse(text)
const iso = (ms: number | null | undefined) => (ms == null ? null : new Date(ms).toISOString())
const berlin = (expression: string, fromMs: number) =>
  cronSchedule(new Cron(expression, { timezone: 'Europe/Berlin' }), fromMs)

/** The slot every fire from `fromMs` to `toMs`, each 100 ms, is for: one when they agree. */
function slotsOf(schedule: ReturnType<typeof everySchedule>, fromMs: number, toMs: number): string[] {
  const slots = new Set<string | null>()
  for (let ms = fromMs; ms <= toMs; ms += 100) slots.add(iso(nearestSlot(schedule, ms)?.slot))
  return [...slots] as string[]
}

describe('--every: whole multiples of the interval since the epoch', () => {
  test('a fire is for the nearest slot, before or after it; on a tie, the earlier', () => {
    const every = everySchedule(10_000)
    assert.deepEqual(nearestSlot(every, 19_000), { slot: 20_000, next: 30_000 })
    assert.deepEqual(nearestSlot(every, 21_000), { slot: 20_000, next: 30_000 })
    assert.deepEqual(nearestSlot(every, 20_000), { slot: 20_000, next: 30_000 })
    assert.deepEqual(nearestSlot(every, 25_000), { slot: 20_000, next: 30_000 })
    assert.deepEqual(nearestSlot(every, 25_001), { slot: 30_000, next: 40_000 })
  })

  test('--every 1d is midnight UTC and --every 1h the hour, whatever zone the host is in', () => {
    const day = nearestSlot(everySchedule(86_400_000), at('2026-03-29T03:00:00+02:00'))
    assert.equal(iso(day?.slot), '2026-03-29T00:00:00.000Z')
    assert.equal(iso(day?.next), '2026-03-30T00:00:00.000Z')
    const hour = nearestSlot(everySchedule(3_600_000), at('2026-10-25T02:59:30+02:00'))
    assert.equal(iso(hour?.slot), '2026-10-25T01:00:00.000Z')
  })

  test('fires up to 2 s either side of a slot of --every 10s all name that slot', () => {
    assert.deepEqual(slotsOf(everySchedule(10_000), 1_800_000_000_000 - 2000, 1_800_000_000_000 + 2000), [
      '2027-01-15T08:00:00.000Z',
    ])
  })
})

describe('--cron with --tz Europe/Berlin: slots named by croner, on the days the clocks change', () => {
  // Europe/Berlin, 2026: the clocks go 02:00 CET → 03:00 CEST on Sunday 29 March (01:00Z), and
  // 03:00 CEST → 02:00 CET on Sunday 25 October (01:00Z).
  test('spring forward: a daily 02:30, which that day does not exist, is the slot 03:00 CEST, when the clocks jump', () => {
    const daily = berlin('30 2 * * *', at('2026-03-28T00:00:00Z'))
    const gap = at('2026-03-29T01:00:00Z')
    assert.deepEqual(slotsOf(daily, gap - 2000, gap + 2000), ['2026-03-29T01:00:00.000Z'])
    assert.equal(iso(nearestSlot(daily, gap)?.next), '2026-03-30T00:30:00.000Z', 'next day 02:30 CEST')
    // Every 30 minutes, the hour that does not exist has no slots: 01:30 CET is followed by 03:00 CEST.
    const half = berlin('*/30 * * * *', at('2026-03-29T00:00:00Z'))
    assert.equal(iso(nearestSlot(half, at('2026-03-29T00:30:00Z'))?.next), '2026-03-29T01:00:00.000Z')
  })

  test('fall back: a daily 02:30 runs once, in CEST; every 30 minutes runs both 02:30s, an hour apart', () => {
    const daily = berlin('30 2 * * *', at('2026-10-24T00:00:00Z'))
    const first = at('2026-10-25T00:30:00Z')
    assert.deepEqual(slotsOf(daily, first - 2000, first + 2000), ['2026-10-25T00:30:00.000Z'])
    assert.equal(iso(nearestSlot(daily, first)?.next), '2026-10-26T01:30:00.000Z', 'not the repeated 02:30 CET')
    // The repeated 02:30 CET is an hour after the first; fires around it, on either host, name it.
    const half = berlin('*/30 * * * *', at('2026-10-24T22:00:00Z'))
    const repeated = at('2026-10-25T01:30:00Z')
    assert.deepEqual(slotsOf(half, repeated - 2000, repeated + 2000), ['2026-10-25T01:30:00.000Z'])
    assert.equal(half.gapMs, 30 * 60_000, 'the gap is 30 min of real time, through the change too')
  })

  test('the shortest gap, which sets the defaults, counts the short day of a daily schedule', async () => {
    // 02:30 CET on 28 March to 03:00 CEST on 29 March, the gap's slot: 23 h 30 min.
    assert.equal(berlin('30 2 * * *', at('2026-01-01T00:00:00Z')).gapMs, 23.5 * 3_600_000)
    const plan = await readPlan(values({ cron: '*/10 * * * *', tz: 'Europe/Berlin' }), Date.now())
    assert.equal(plan.withinMs, 5 * 60_000, 'half the gap, at most 5 min')
    assert.equal(plan.leaseMs, LEASE.EVERY_10_MIN, '80% of the gap')
    assert.equal((await readPlan(values({ everyMs: 2000 }), 0)).withinMs, 1000)
    assert.equal((await readPlan(values({ everyMs: 2000 }), 0)).leaseMs, 1600)
  })
})

/** exec's checked values, as parseOptions gives them, with `given` over a job and a command. */
function values(given: Record<string, unknown>) {
  return {
    table: 'cron_leases',
    format: 'text',
    overdueFactor: 2,
    jobs: ['job'],
    host: '',
    port: 0,
    basePath: '/',
    allowActions: false,
    argv: ['true'],
    ...given,
  } as Parameters<typeof readPlan>[0]
}

describe('bad input: exit 2, one line naming the argument, nothing claimed', () => {
  async function cli(args: string[]) {
    const run = { code: -1, stdout: '', stderr: '', connects: 0 }
    const io: CliIo = {
      stdout: { write: (text) => (run.stdout += text) },
      stderr: { write: (text) => (run.stderr += text) },
      env: { DATABASE_URL: 'postgres://app@127.0.0.1:5432/app' },
      connect: async () => {
        run.connects++
        throw new Exit('the unit tests have no database', 1)
      },
    }
    run.code = await main(['exec', ...args], io)
    return run
  }

  const cases: [string, string[], RegExp][] = [
    ['no --', ['--job', 'j', '--every', '1m', 'echo', 'hi'], /runs the command given after --.*got "echo" before it/],
    ['nothing after --', ['--job', 'j', '--every', '1m', '--'], /exec needs a command after --/],
    ['no -- at all', ['--job', 'j', '--every', '1m'], /runs the command given after --.*none was given/],
    [
      'both --cron and --every',
      ['--job', 'j', '--cron', '* * * * *', '--every', '1m', '--', 'true'],
      /--cron and --every cannot both be given/,
    ],
    ['neither', ['--job', 'j', '--', 'true'], /exec needs --cron <expr> or --every <duration>/],
    [
      'a bad expression',
      ['--job', 'j', '--cron', '61 * * * *', '--', 'true'],
      /^pg-cron-lease: --cron must be a cron expression such as "0 \* \* \* \*", got "61 \* \* \* \*"/,
    ],
    [
      'an expression that never fires',
      ['--job', 'j', '--cron', '0 0 30 2 *', '--', 'true'],
      /--cron "0 0 30 2 \*" never fires again/,
    ],
    [
      'a bad zone',
      ['--job', 'j', '--cron', '0 * * * *', '--tz', 'Mars/Olympus', '--', 'true'],
      /--tz must be an IANA time zone such as Europe\/Berlin or UTC, got "Mars\/Olympus"/,
    ],
    [
      '--tz with --every',
      ['--job', 'j', '--every', '1h', '--tz', 'Europe/Berlin', '--', 'true'],
      /--tz goes with --cron/,
    ],
    [
      '--within larger than the interval',
      ['--job', 'j', '--every', '1m', '--within', '2m', '--', 'true'],
      /--within must be at most 1 min, the gap between slots, got 2 min/,
    ],
    [
      '--within larger than the shortest cron gap',
      ['--job', 'j', '--cron', '*/5 * * * *', '--within', '6m', '--', 'true'],
      /--within must be at most 5 min/,
    ],
    [
      'a bad duration',
      ['--job', 'j', '--every', '90', '--', 'true'],
      /--every must be a duration in whole d, h, m and s/,
    ],
    [
      'a zero duration',
      ['--job', 'j', '--every', '1m', '--kill-after', '0s', '--', 'true'],
      /--kill-after must be longer than zero/,
    ],
    [
      'a lease past the longest',
      ['--job', 'j', '--every', '1m', '--lease', '30d', '--', 'true'],
      /--lease must be at most/,
    ],
    ['no --job', ['--every', '1m', '--', 'true'], /exec needs --job <name>/],
    ['two --job', ['--job', 'a', '--job', 'b', '--every', '1m', '--', 'true'], /exec runs one --job/],
    [
      'a bad --skipped-exit',
      ['--job', 'j', '--every', '1m', '--skipped-exit', '256', '--', 'true'],
      /--skipped-exit must be a whole number from 0 to 255, got "256"/,
    ],
    [
      'an unknown option',
      ['--job', 'j', '--every', '1m', '--grace', '1m', '--', 'true'],
      /unknown option --grace for exec/,
    ],
  ]
  for (const [what, args, message] of cases) {
    test(what, async () => {
      const run = await cli(args)
      assert.equal(run.code, 2, `exit code (stderr: ${run.stderr})`)
      assert.equal(run.stdout, '')
      assert.match(run.stderr, /^pg-cron-lease: [^\n]+\n$/, 'one line')
      assert.match(run.stderr, message)
      assert.equal(run.connects, 0, 'no connection, so nothing claimed')
    })
  }

  test("the command's own options after -- are its own, --help among them", async () => {
    const run = await cli(['--job', 'j', '--every', '1m', '--', 'ls', '--help', '--every'])
    assert.equal(run.code, 1, 'it got as far as connecting')
    assert.equal(run.connects, 1)
  })

  test('exec --help shows its usage; the main help lists exec', async () => {
    const help = await cli(['--help'])
    assert.equal(help.code, 0)
    assert.match(
      help.stdout,
      /^Usage: pg-cron-lease exec --job <name> \(--cron <expr> \[--tz <zone>\] \| --every <duration>\)/,
    )
    for (const option of ['--lease', '--within', '--kill-after', '--skipped-exit', 'PG_CRON_LEASE_OCCURRENCE', '127']) {
      assert.ok(help.stdout.includes(option), option)
    }
    const run = { stdout: '' }
    await main(['--help'], { stdout: { write: (t) => (run.stdout += t) }, stderr: { write: () => {} }, env: {} })
    assert.match(run.stdout, /\n {2}exec {2,}Run a command once per occurrence of a schedule/)
  })
})
