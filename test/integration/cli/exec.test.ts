/**
 * `pg-cron-lease exec` as real processes against the test database: the bin built from
 * tsdown.config.ts into a directory laid out like an installed package, each "host" a process of
 * its own, each command a real child. Slots are a few seconds apart, and every process is started
 * at a moment chosen by the database clock, so each test takes seconds. Argument errors and slot
 * arithmetic are tested in-process in test/unit/exec.test.ts.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { build, type UserConfig } from 'tsdown'
import { freePort, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { listRuns, type RunInfo } from '../../../src/index.ts'
import config from '../../../tsdown.config.ts'
import { type Finished, finished } from '../../helpers/child.ts'

const ROOT = fileURLToPath(new URL('../../..', import.meta.url))

let pool: pg.Pool
let url: string
let installed: string
let scratch: string

before(async () => {
  url = await testDatabaseUrl()
  pool = await testPool({}, 2)
  const cli = (config as UserConfig[]).find((c) => typeof c.entry === 'object' && 'cli' in (c.entry as object))
  assert.ok(cli, 'tsdown.config.ts has a cli entry')
  installed = mkdtempSync(path.join(os.tmpdir(), 'pgcl-exec-'))
  await build({ ...cli, config: false, cwd: ROOT, outDir: path.join(installed, 'dist'), logLevel: 'error' })
  copyFileSync(path.join(ROOT, 'package.json'), path.join(installed, 'package.json'))
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(installed, 'node_modules'), 'dir')
  scratch = mkdtempSync(path.join(os.tmpdir(), 'pgcl-exec-runs-'))
})

after(async () => {
  await pool?.end()
  for (const dir of [installed, scratch]) if (dir) rmSync(dir, { recursive: true, force: true })
})

/** One `exec` process, as a host's crontab starts it; `detached` puts it in a process group of its own. */
function exec(args: string[], options: { detached?: boolean; env?: Record<string, string>; dir?: string } = {}) {
  const child = spawn(process.execPath, [path.join(options.dir ?? installed, 'dist/cli.mjs'), 'exec', ...args], {
    env: { ...process.env, DATABASE_URL: url, ...options.env },
    detached: options.detached ?? false,
  })
  return { child, done: finished(child, { killAfterMs: 30_000 }) }
}

/** A file a command appends a line to: one line per run of it. */
function marker(name: string): { file: string; lines(): string[] } {
  const file = path.join(scratch, name)
  return { file, lines: () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : []) }
}

/** A shell command that writes its occurrence and job to `file`, then runs `rest`. */
const recording = (file: string, rest = 'true') => [
  'sh',
  '-c',
  `echo "$PG_CRON_LEASE_OCCURRENCE $PG_CRON_LEASE_JOB $$" >> '${file}'; ${rest}`,
]

/** This machine's clock minus the database's, from one round trip's midpoint. */
async function clockOffsetMs(): Promise<number> {
  const sent = Date.now()
  const { rows } = await pool.query('SELECT clock_timestamp() AS now')
  return (sent + Date.now()) / 2 - rows[0].now.getTime()
}

/**
 * The first slot of `everyMs` at least `leadMs` ahead of the database clock, and `at(d)`, which
 * waits until the database clock reads that slot plus `d` (negative: before it).
 */
async function upcomingSlot(everyMs: number, leadMs: number) {
  const offset = await clockOffsetMs()
  const slot = Math.ceil((Date.now() - offset + leadMs) / everyMs) * everyMs
  return { slot, at: (d: number) => sleep(Math.max(0, slot + d - (Date.now() - offset))) }
}

async function runsOf(table: string, jobName: string): Promise<RunInfo[]> {
  return listRuns(pool, { table, jobName })
}

const iso = (ms: number) => new Date(ms).toISOString().replace('Z', '000Z')

function assertExit(run: Finished, code: number) {
  assert.equal(run.code, code, `exit code (stdout: ${run.stdout}, stderr: ${run.stderr})`)
}

// Tests that time their processes run one at a time: on a busy machine a process started
// with others can take seconds to read the clock. Only the group that times nothing runs at once.
describe('pg-cron-lease exec', () => {
  describe('one run per slot, whichever host fires first', () => {
    test('five exec processes for one slot, started up to 2 s apart on both sides: the command runs once, for that slot', async () => {
      const table = await freshTable(pool, 'exec_five')
      const ran = marker('five')
      // Every 10 s, so --within is 5 s: each fire is nearest to the same slot.
      const { slot, at } = await upcomingSlot(10_000, 2500)
      const hosts: ReturnType<typeof exec>[] = []
      for (const d of [-2000, -1000, 0, 1000, 2000]) {
        await at(d)
        hosts.push(exec(['--job', 'five', '--every', '10s', '--table', table, '--', ...recording(ran.file)]))
      }
      const runs = await Promise.all(hosts.map((h) => h.done))
      for (const run of runs) assertExit(run, 0)
      assert.deepEqual(
        ran.lines().map((l) => l.split(' ').slice(0, 2).join(' ')),
        [`${new Date(slot).toISOString()} five`],
        'exactly one command ran, told its slot and job',
      )
      const history = await runsOf(table, 'five')
      assert.equal(history.length, 1)
      assert.equal(history[0]!.occurrence, iso(slot))
      assert.equal(history[0]!.outcome, 'ok')
      // The four others said nothing: a crontab on three hosts would mail every skip otherwise.
      assert.equal(runs.filter((r) => r.stderr === '').length, 5, runs.map((r) => r.stderr).join('|'))
    })

    test('--cron with --tz Europe/Berlin: processes either side of a slot agree on it, and one runs it', async () => {
      const table = await freshTable(pool, 'exec_cron')
      const ran = marker('cron')
      // Seconds first: every 10 s, so --within is 5 s.
      const { slot, at } = await upcomingSlot(10_000, 1500)
      const args = ['--job', 'berlin', '--cron', '*/10 * * * * *', '--tz', 'Europe/Berlin', '--table', table]
      const hosts: ReturnType<typeof exec>[] = []
      for (const d of [-1000, 0, 1000]) {
        await at(d)
        hosts.push(exec([...args, '--', ...recording(ran.file)]))
      }
      for (const run of await Promise.all(hosts.map((h) => h.done))) assertExit(run, 0)
      assert.deepEqual(
        ran.lines().map((l) => l.split(' ')[0]),
        [new Date(slot).toISOString()],
      )
      assert.deepEqual(
        (await runsOf(table, 'berlin')).map((r) => [r.occurrence, r.outcome]),
        [[iso(slot), 'ok']],
      )
    })

    test('a fire outside --within runs nothing, says so, exits with --skipped-exit, and the next run counts the miss', async () => {
      const table = await freshTable(pool, 'exec_within')
      const ran = marker('within')
      const args = ['--job', 'narrow', '--every', '6s', '--within', '1s', '--table', table]
      // Started early, as a host with a fast clock fires: exec itself waits for the slot.
      const { slot, at } = await upcomingSlot(6000, 1000)
      await at(-800)
      assertExit(await exec([...args, '--', ...recording(ran.file)]).done, 0)
      // Midway between the next slot and the one after, 3 s from each: a process slow to start (a
      // loaded machine takes seconds) still reads the database clock over 1 s from either.
      await at(6000 + 3000)
      const skipped = await exec([...args, '--skipped-exit', '5', '--', ...recording(ran.file)]).done
      assertExit(skipped, 5)
      assert.match(skipped.stderr, /^pg-cron-lease: exec narrow: .* outside --within 1 s: the command was not started/)
      assert.equal(ran.lines().length, 1, 'the skipped fire started no command')
      await at(12_000 - 800)
      assertExit(await exec([...args, '--', ...recording(ran.file)]).done, 0)
      const history = await runsOf(table, 'narrow')
      assert.deepEqual(
        history.map((r) => [r.occurrence, r.missed]),
        [
          [iso(slot + 12_000), 1],
          [iso(slot), 0],
        ],
      )
    })
  })

  describe("the command's end, recorded", { concurrency: true }, () => {
    // --within as wide as the gap: any moment is near enough a slot, and a fire waits at most 1 s.
    const anyTime = (job: string, table: string) => ['--job', job, '--every', '2s', '--within', '2s', '--table', table]

    test('a command that exits 3: exec exits 3, and the run is an error with its last line of stderr', async () => {
      const table = await freshTable(pool, 'exec_three')
      const run = await exec([
        ...anyTime('three', table),
        '--',
        'sh',
        '-c',
        'echo first >&2; printf "disk full" >&2; exit 3',
      ]).done
      assertExit(run, 3)
      assert.equal(run.stderr, 'first\ndisk full', "the command's stderr passes through as it was")
      const [recorded] = await runsOf(table, 'three')
      assert.equal(recorded?.outcome, 'error')
      assert.equal(recorded?.error, 'exec: exit code 3: disk full')
    })

    test('a command that does not exist: exit 127, recorded as an error', async () => {
      const table = await freshTable(pool, 'exec_missing')
      const run = await exec([...anyTime('missing', table), '--', '/nonexistent/command', 'arg']).done
      assertExit(run, 127)
      assert.match(run.stderr, /^pg-cron-lease: exec cannot start "\/nonexistent\/command": ENOENT\n$/)
      const [recorded] = await runsOf(table, 'missing')
      assert.equal(recorded?.outcome, 'error')
      assert.equal(recorded?.error, 'exec: cannot start "/nonexistent/command": ENOENT')
    })

    test('the database down: exit 1, and the command is not started', async () => {
      const ran = marker('down')
      const down = `postgres://postgres@127.0.0.1:${await freePort()}/postgres`
      const run = await exec(['--job', 'down', '--every', '2s', '--url', down, '--', ...recording(ran.file)]).done
      assertExit(run, 1)
      assert.match(run.stderr, /^pg-cron-lease: cannot connect to 127\.0\.0\.1:\d+\/postgres: connection refused/)
      assert.deepEqual(ran.lines(), [])
    })

    test('without croner installed, --cron exits 1 saying to install it, before anything is claimed', async () => {
      const bare = mkdtempSync(path.join(os.tmpdir(), 'pgcl-exec-bare-'))
      try {
        mkdirSync(path.join(bare, 'dist'))
        copyFileSync(path.join(installed, 'dist/cli.mjs'), path.join(bare, 'dist/cli.mjs'))
        const ran = marker('bare')
        const run = await exec(['--job', 'bare', '--cron', '* * * * *', '--', ...recording(ran.file)], { dir: bare })
          .done
        assertExit(run, 1)
        assert.equal(
          run.stderr,
          'pg-cron-lease: --cron needs the croner package, which is not installed: run npm install croner\n',
        )
        assert.deepEqual(ran.lines(), [])
      } finally {
        rmSync(bare, { recursive: true, force: true })
      }
    })

    test('SIGTERM to exec: passed on to the command, which leaves no orphan; exit 143, the run an error', async () => {
      const table = await freshTable(pool, 'exec_term')
      const ran = marker('term')
      const host = exec([...anyTime('term', table), '--', ...recording(ran.file, 'exec sleep 30')])
      const pid = await startedPid(ran)
      host.child.kill('SIGTERM')
      const run = await host.done
      assertExit(run, 143)
      assert.equal(alive(pid), false, 'the command ended with exec')
      const [recorded] = await runsOf(table, 'term')
      assert.equal(recorded?.outcome, 'error')
      assert.equal(recorded?.error, 'exec: killed by SIGTERM')
    })

    test('SIGKILL to exec: its run reads as unfinished once its lease has ended', async () => {
      const table = await freshTable(pool, 'exec_kill')
      const ran = marker('kill')
      const host = exec([...anyTime('kill', table), '--lease', '1s', '--', ...recording(ran.file, 'exec sleep 30')], {
        detached: true,
      })
      const pid = await startedPid(ran)
      try {
        const exited = new Promise((resolve) => host.child.once('exit', (_code, signal) => resolve(signal)))
        process.kill(host.child.pid!, 'SIGKILL')
        // Not host.done: the orphan holds exec's stdout and stderr open.
        assert.equal(await exited, 'SIGKILL')
        // The keep-alive died with exec: the lease ends at most 1 s after its last beat.
        await sleep(1500)
        const [recorded] = await runsOf(table, 'kill')
        assert.equal(recorded?.outcome, 'unfinished')
        assert.equal(recorded?.finishedAt, null)
      } finally {
        // exec could not pass SIGKILL on: its orphan is the supervisor's to end (systemd, Kubernetes do).
        if (alive(pid)) process.kill(pid, 'SIGKILL')
        await host.done
      }
    })
  })

  describe('a command longer than its lease', () => {
    test('is kept alive: a second exec for its slot, and one for the next slot, do not run while it runs', async () => {
      const table = await freshTable(pool, 'exec_long')
      const ran = marker('long')
      const args = ['--job', 'long', '--every', '4s', '--lease', '1s', '--table', table]
      const { slot, at } = await upcomingSlot(4000, 1000)
      await at(-300)
      const first = exec([...args, '--', ...recording(ran.file, 'sleep 6')])
      await at(1500)
      const sameSlot = exec([...args, '--', ...recording(ran.file)])
      await at(4000 - 300)
      const nextSlot = exec([...args, '--', ...recording(ran.file)])
      assertExit(await sameSlot.done, 0)
      assertExit(await nextSlot.done, 0)
      assertExit(await first.done, 0)
      assert.equal(ran.lines().length, 1, ran.lines().join('\n'))
      const history = await runsOf(table, 'long')
      assert.deepEqual(
        history.map((r) => [r.occurrence, r.outcome]),
        [[iso(slot), 'ok']],
      )
      assert.ok(history[0]!.durationMs! >= 5900, `ran ${history[0]!.durationMs} ms on a 1 s lease`)
    })

    test('a lease lost all the same: the command gets SIGTERM, and the run is an error saying so', async () => {
      const table = await freshTable(pool, 'exec_lost')
      const ran = marker('lost')
      const host = exec([
        '--job',
        'lost',
        '--every',
        '2s',
        '--within',
        '2s',
        '--lease',
        '1s',
        '--table',
        table,
        '--',
        ...recording(ran.file, 'exec sleep 30'),
      ])
      const pid = await startedPid(ran)
      // Another claim takes the row over, as one would after the lease ran out unseen.
      await pool.query(`UPDATE "${table}" SET claimed_at = clock_timestamp() WHERE job_name = 'lost'`)
      const run = await host.done
      assertExit(run, 143)
      assert.match(
        run.stderr,
        /^pg-cron-lease: the lease for 'lost' was lost: .*; stopping the command: SIGTERM, then SIGKILL after 10 s\n$/,
      )
      assert.equal(alive(pid), false, 'the command was stopped')
      // Its outcome is fenced on its claim, which is gone: the claim that replaced it owns the row now.
      const [row] = (await pool.query(`SELECT last_outcome FROM "${table}" WHERE job_name = 'lost'`)).rows
      assert.equal(row.last_outcome, null)
    })
  })
})

/** The pid the recording command wrote, once it has started. */
async function startedPid(ran: ReturnType<typeof marker>): Promise<number> {
  for (let waited = 0; ran.lines().length === 0; waited += 50) {
    assert.ok(waited < 10_000, 'the command started within 10 s')
    await sleep(50)
  }
  return Number(ran.lines()[0]!.split(' ')[2])
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
