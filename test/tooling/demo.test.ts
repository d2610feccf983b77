/**
 * `npm run demo` run as a user would run it: a child process, its output read back. It must show
 * the problem (unguarded replicas run every occurrence several times) and the fix (with the lease,
 * none twice), and clean up after itself on Ctrl-C.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { describe, test } from 'node:test'
import { testDatabaseUrl } from '../../dev/postgres.ts'

interface Run {
  child: ChildProcess
  output: () => string
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

function runDemo(args: string[], options: { detached?: boolean } = {}): Run {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/demo.ts', ...args], {
    env: { ...process.env, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached ?? false,
  })
  let output = ''
  child.stdout?.on('data', (chunk) => {
    output += chunk
  })
  child.stderr?.on('data', (chunk) => {
    output += chunk
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  )
  return { child, output: () => output, exited }
}

/** The summary table's row for a mode: occurrences, runs, duplicates, misses. */
function summaryRow(output: string, mode: string) {
  const summary = output.slice(output.lastIndexOf('Summary:'))
  const match = summary.match(new RegExp(`^\\s+${mode}\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s`, 'm'))
  assert.ok(match, `no summary row for '${mode}' in:\n${output}`)
  const [occurrences, runs, duplicates, misses] = match.slice(1).map(Number) as [number, number, number, number]
  return { occurrences, runs, duplicates, misses }
}

async function waitFor(run: Run, pattern: RegExp, ms: number): Promise<void> {
  const until = Date.now() + ms
  while (!pattern.test(run.output())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${pattern} in:\n${run.output()}`)
    if (run.child.exitCode !== null) throw new Error(`the demo exited early:\n${run.output()}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

/** Processes whose command line mentions `text` (read from /proc, so no external tool is needed). */
function processesMentioning(text: string): number[] {
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(text)) pids.push(Number(entry))
    } catch {
      // The process ended while the list was read.
    }
  }
  return pids
}

/** Processes in a process group: the demo, its replicas and the server it started share one. */
function processesInGroup(pgid: number): number[] {
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      // "pid (comm) state ppid pgrp …"; comm may hold spaces or parentheses, so read after the last ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      if (Number(fields[2]) === pgid) pids.push(Number(entry))
    } catch {
      // The process ended while the list was read.
    }
  }
  return pids
}

describe('the demo shows the problem and the fix', () => {
  test('unguarded replicas run each occurrence several times; with the lease, each runs once', async () => {
    const run = runDemo([
      '--mode',
      'none,lease',
      '--seconds',
      '3',
      '--replicas',
      '3',
      '--database-url',
      await testDatabaseUrl(),
    ])
    const { code } = await run.exited
    const output = run.output()
    assert.equal(code, 0, output)
    const none = summaryRow(output, 'none')
    assert.equal(none.occurrences, 3)
    assert.equal(none.runs, 9, output)
    assert.equal(none.duplicates, 6, output)
    const lease = summaryRow(output, 'lease')
    assert.equal(lease.occurrences, 3)
    assert.equal(lease.duplicates, 0, output)
    assert.equal(lease.runs + lease.misses, 3, output)
    assert.equal(output.includes('\u001b['), false, 'NO_COLOR output has no escape codes')
  })

  test('--dashboard serves jobs claimed by occurrence: a healthy one, and one with a miss, an error and a run that died', async () => {
    const run = runDemo([
      ...['--mode', 'lease', '--seconds', '2', '--replicas', '2'],
      ...['--database-url', await testDatabaseUrl(), '--dashboard', '--dashboard-port', '0'],
    ])
    try {
      await waitFor(run, /Dashboard of the demo's table: http:\/\/127\.0\.0\.1:\d+\//, 90_000)
      const url = /Dashboard of the demo's table: (\S+)/.exec(run.output())![1]!
      const get = async <T>(route: string) => (await (await fetch(`${url}${route}`)).json()) as T
      interface Job {
        jobName: string
        lastOutcome: string | null
        overdue: boolean
        everyMs: number | null
      }
      interface Run {
        occurrence: string | null
        outcome: string
        holder: string | null
        error: string | null
        missed: number
      }
      const jobs = await get<Job[]>('api/jobs')
      assert.deepEqual(
        jobs.map((j) => j.jobName),
        ['demo:incidents', 'demo:lease'],
      )
      // The healthy job: still running, every run ok, none late, so nothing flags it.
      const healthy = jobs.find((j) => j.jobName === 'demo:lease')!
      assert.equal(healthy.lastOutcome, 'ok', JSON.stringify(healthy))
      assert.equal(healthy.overdue, false, JSON.stringify(healthy))
      assert.equal(healthy.everyMs, 1000, 'the interval comes from the occurrences named')
      const leaseRuns = await get<Run[]>('api/jobs/demo%3Alease/runs')
      assert.ok(leaseRuns.length >= 3, JSON.stringify(leaseRuns))
      assert.ok(
        leaseRuns.every((r) => r.outcome === 'ok' && r.occurrence !== null),
        JSON.stringify(leaseRuns),
      )

      // The other job, claimed by occurrence, newest first: each incident as it happened.
      const runs = (await get<Run[]>('api/jobs/demo%3Aincidents/runs')).reverse()
      assert.ok(
        runs.every((r) => r.occurrence !== null),
        `every run names its occurrence: ${JSON.stringify(runs)}`,
      )
      const second = (r: Run) => Date.parse(r.occurrence!) / 1000
      const afterMiss = runs.findIndex((r) => r.missed === 1)
      assert.ok(afterMiss > 0, `a run counts one occurrence missed before it: ${JSON.stringify(runs)}`)
      assert.equal(second(runs[afterMiss]!) - second(runs[afterMiss - 1]!), 2, 'the occurrence between them was missed')
      const failed = runs.filter((r) => r.outcome === 'error')
      assert.equal(failed.length, 1, JSON.stringify(runs))
      assert.match(failed[0]!.error ?? '', /^Error: the report service answered 503/)
      // The run that died: its replica, a real process, was killed (SIGKILL) in the middle of it.
      const [, killed, pid] =
        /died: (replica-\d+) \(pid (\d+)\) killed \(SIGKILL\) during its run/.exec(run.output()) ?? []
      assert.ok(killed && pid, `the demo says which replica it killed:\n${run.output()}`)
      assert.equal(existsSync(`/proc/${pid}`), false, `process ${pid} is gone`)
      const died = runs.filter((r) => r.outcome === 'unfinished')
      assert.equal(died.length, 1, JSON.stringify(runs))
      assert.equal(died[0]!.holder, killed)
      assert.ok(
        runs.filter((r) => second(r) > second(died[0]!)).every((r) => r.outcome === 'ok'),
        `the occurrences after it run on: ${JSON.stringify(runs)}`,
      )
      assert.doesNotMatch(run.output(), /exited \(/, 'no replica exited but the one killed on purpose')
    } finally {
      run.child.kill('SIGINT')
    }
    const { code } = await run.exited
    assert.equal(code, 130, run.output())
  })

  test('a bad flag is refused with a usage line before anything starts', async () => {
    const run = runDemo(['--mode', 'sometimes'])
    const { code } = await run.exited
    assert.equal(code, 2)
    assert.match(run.output(), /--mode must be one of none, advisory, lease/)
    assert.match(run.output(), /usage: npm run demo/)
  })
})

describe('the demo cleans up on Ctrl-C', () => {
  test('Ctrl-C stops the replicas and the embedded Postgres and removes its data directory', async () => {
    // A process group of its own, signalled as a whole: what a terminal does on Ctrl-C.
    const run = runDemo(['--mode', 'none', '--seconds', '60', '--replicas', '2'], { detached: true })
    let dataDir: string | undefined
    try {
      await waitFor(run, /DUPLICATE/, 60_000)
      dataDir = run.output().match(/data in (\S+)/)?.[1]
      assert.ok(dataDir, `the demo did not say where its data is:\n${run.output()}`)
      assert.ok(existsSync(dataDir), 'the data directory exists while the demo runs')
      // The checks below can see what they look for: the server, the demo and its two replicas.
      assert.notDeepEqual(processesMentioning(dataDir), [], 'the server runs on that data directory')
      assert.ok(processesInGroup(run.child.pid!).length >= 3, 'the demo and its replicas share its process group')
      process.kill(-run.child.pid!, 'SIGINT')
      const { code } = await run.exited
      assert.equal(code, 130, run.output())
      assert.equal(existsSync(dataDir), false, 'the data directory is removed')
      assert.equal(existsSync(dataDir.replace(/\/data$/, '')), false, 'its temporary parent is removed')
      assert.deepEqual(processesMentioning(dataDir), [], 'no postgres process is left for that data directory')
      assert.deepEqual(processesInGroup(run.child.pid!), [], 'no process of the demo (replica or server) is left')
    } finally {
      if (run.child.exitCode === null && run.child.signalCode === null) process.kill(-run.child.pid!, 'SIGKILL')
      if (dataDir) {
        for (const pid of processesMentioning(dataDir)) process.kill(pid, 'SIGKILL')
        rmSync(dataDir.replace(/\/data$/, ''), { recursive: true, force: true })
      }
    }
  })
})
