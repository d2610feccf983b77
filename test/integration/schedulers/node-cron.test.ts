/**
 * node-cron 4, for real: second-level schedules, several replicas, one `leaseCoordinator` each,
 * on real Postgres. Occurrences are counted by the database clock (see helpers/occurrences.ts).
 * How each run ended is read from the lease row the coordinator writes.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import readline from 'node:readline'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import cron, { type ScheduledTask } from 'node-cron'
import type pg from 'pg'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { type LeaseCoordinator, leaseCoordinator, listLeases } from '../../../src/index.ts'
import { TABLE_FACTS_SQL } from '../../../src/sql.ts'
import { assertExactlyOnce, databaseMs, readRuns, recordRun, runsTable } from '../../helpers/occurrences.ts'

const INTERVAL_MS = 1000
const LEASE_MS = 800
const REPLICAS = 3
const MIN_OCCURRENCES = 5
/** Long enough for at least MIN_OCCURRENCES second boundaries with all replicas up. */
const WINDOW_MS = 6200
const HOUR_MS = 3_600_000

const root = fileURLToPath(new URL('../../..', import.meta.url))
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

let pool: pg.Pool
before(async () => {
  pool = await testPool()
})
after(async () => {
  await pool.end()
})

describe('node-cron 4 with leaseCoordinator: every occurrence runs exactly once', () => {
  test('three replicas as separate tasks with separate holders and pools, every second for six seconds', async () => {
    const leases = await freshTable(pool, 'cron_tasks')
    const runs = await runsTable(pool)
    const pools = await Promise.all(Array.from({ length: REPLICAS }, () => testPool({ max: 2 })))
    // Each replica knows the table's shape before the first fire, as one that has been running
    // does (see test/helpers/cron-replica.ts).
    await Promise.all(pools.map((replicaPool) => listLeases(replicaPool, { table: leases })))
    const inFlight = new Set<Promise<unknown>>()
    const tasks = pools.map((replicaPool, i) =>
      cron.schedule(
        '* * * * * *',
        () => {
          const run = recordRun(replicaPool, runs, `replica-${i}`)
          inFlight.add(run)
          return run.finally(() => inFlight.delete(run))
        },
        {
          name: 'report:every-second',
          distributed: true,
          distributedLease: LEASE_MS,
          runCoordinator: leaseCoordinator(replicaPool, { table: leases, holder: `replica-${i}` }),
        },
      ),
    )
    try {
      await sleep(WINDOW_MS)
    } finally {
      await Promise.all(tasks.map((task) => task.destroy()))
      await sleep(300)
      await Promise.allSettled([...inFlight])
      await Promise.all(pools.map((p) => p.end()))
    }
    const report = await readRuns(pool, runs, INTERVAL_MS)
    console.log(`# node-cron tasks: ${JSON.stringify(report)}`)
    assertExactlyOnce(report, INTERVAL_MS, MIN_OCCURRENCES)
    const { rows } = await pool.query(`SELECT job_name FROM "${leases}"`)
    assert.deepEqual(rows, [{ job_name: 'report:every-second' }], 'the claim is on the task name, slot stripped')
  })

  test("three replicas as separate processes, one with its Date shifted by five hours: node-cron's keys disagree, the lease does not", async () => {
    const skewMs = -5 * HOUR_MS
    const { report, replicas, windowStartMs } = await runProcesses([skewMs, 0, 0])
    console.log(`# node-cron processes, one skewed by ${skewMs} ms: ${JSON.stringify(report)}`)
    assertExactlyOnce(report, INTERVAL_MS, MIN_OCCURRENCES)
    // The skew really reached node-cron: the skewed replica's slot is five hours behind the database.
    const slotOf = (key: string) => Date.parse(/\d{4}-\d\d-\d\dT[\d:.]+Z$/.exec(key)?.[0] ?? 'none')
    const skewed = slotOf(replicas[0]!.firstKey!)
    const straight = slotOf(replicas[1]!.firstKey!)
    assert.ok(Math.abs(skewed - (windowStartMs + skewMs)) < 30_000, `skewed key ${replicas[0]!.firstKey}`)
    assert.ok(Math.abs(straight - windowStartMs) < 30_000, `straight key ${replicas[1]!.firstKey}`)
    for (const replica of replicas) {
      assert.equal(replica.done?.errors, 0)
      assert.ok(replica.done!.asked >= MIN_OCCURRENCES, `each replica competed: ${JSON.stringify(replica.done)}`)
    }
    assert.equal(
      replicas.reduce((sum, r) => sum + r.done!.won, 0),
      report.runs,
      'every won claim ran its task once',
    )
  })
})

interface Replica {
  child: ChildProcess
  firstKey?: string
  done?: { asked: number; won: number; errors: number; holder: string }
  ready: Promise<void>
  exited: Promise<number | null>
  stderr: string[]
}

/** Starts one replica process per entry of `skews` (the Date shift of each), runs the window, stops them. */
async function runProcesses(skews: number[]) {
  const leases = await freshTable(pool, 'cron_procs')
  const runs = await runsTable(pool)
  const url = await testDatabaseUrl()
  const replicas: Replica[] = skews.map((skewMs, i) => {
    const args = ['--import', 'tsx']
    if (skewMs !== 0) args.push('--import', './dev/skew-clock.ts')
    const child = spawn(process.execPath, [...args, 'test/helpers/cron-replica.ts'], {
      cwd: root,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: {
        ...process.env,
        DATABASE_URL: url,
        LEASE_TABLE: leases,
        RUNS_TABLE: runs,
        JOB: 'sync:eu-west:every-second',
        HOLDER: `process-${i}`,
        LEASE_MS: String(LEASE_MS),
        SKEW_MS: String(skewMs),
      },
    })
    const replica = { child, stderr: [] as string[] } as Replica
    child.stderr!.on('data', (chunk) => replica.stderr.push(String(chunk)))
    replica.exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)))
    replica.ready = new Promise((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`replica ${i} exited (${code}): ${replica.stderr.join('')}`)))
      readline.createInterface({ input: child.stdout! }).on('line', (line) => {
        const message = JSON.parse(line)
        if (message.ready) resolve()
        if (message.firstKey) replica.firstKey = message.firstKey
        if (message.done) replica.done = message
      })
    })
    return replica
  })
  let windowStartMs = 0
  let windowEndMs = 0
  try {
    await Promise.all(replicas.map((r) => r.ready))
    windowStartMs = await databaseMs(pool)
    await sleep(WINDOW_MS)
    windowEndMs = await databaseMs(pool)
  } finally {
    for (const r of replicas) r.child.stdin!.end()
    // Bounded: a replica that does not stop on its own is killed, and the test fails.
    const killer = setTimeout(() => {
      for (const r of replicas) r.child.kill('SIGKILL')
    }, 15_000)
    await Promise.all(replicas.map((r) => r.exited))
    clearTimeout(killer)
  }
  for (const [i, r] of replicas.entries()) {
    assert.equal(await r.exited, 0, `replica ${i} exit code; stderr: ${r.stderr.join('')}`)
  }
  const report = await readRuns(pool, runs, INTERVAL_MS)
  const inWindow = report.atMs.filter((ms) => ms >= windowStartMs && ms <= windowEndMs).length
  assert.ok(inWindow >= MIN_OCCURRENCES, `${inWindow} runs while all ${skews.length} replicas were up`)
  return { report: { ...report, inWindow }, replicas, windowStartMs }
}

/** One lease row's record of the last run, as the coordinator wrote it. */
interface Recorded {
  last_outcome: string | null
  last_error: string | null
  last_finished_at: Date | null
  last_success_at: Date | null
}

// node-cron logs a failing task itself; these tests make tasks fail on purpose.
const silent = { info() {}, warn() {}, error() {}, debug() {} }

/**
 * Schedules `body` every second under `name`, coordinated by `coordinator` with a 500 ms lease, and
 * `wire`s it; resolves the lease row once `done` holds for it (at most 8 s), then destroys the task.
 */
async function recordedRuns(
  table: string,
  coordinator: LeaseCoordinator,
  name: string,
  body: (fire: number) => void,
  wire: (task: ScheduledTask) => void,
  done: (row: Recorded) => boolean,
): Promise<{ row: Recorded; fires: number }> {
  let fires = 0
  const task = cron.schedule('* * * * * *', () => body(++fires), {
    name,
    distributed: true,
    distributedLease: 500,
    runCoordinator: coordinator,
    logger: silent,
  })
  wire(task)
  const read = async () =>
    (
      await pool.query<Recorded>(
        `SELECT last_outcome, last_error, last_finished_at, last_success_at FROM "${table}" WHERE job_name = $1`,
        [name],
      )
    ).rows[0]
  try {
    const deadline = Date.now() + 8000
    for (;;) {
      const row = await read()
      if (row && done(row)) return { row, fires }
      assert.ok(Date.now() < deadline, `recorded within 8 s (${fires} fires): ${JSON.stringify(row)}`)
      await sleep(100)
    }
  } finally {
    await task.destroy()
  }
}

const finished = (row: Recorded) => row.last_finished_at !== null

describe('leaseCoordinator records how each node-cron run ended', () => {
  test("a watched task's run that returns is recorded ok, with its last success", async () => {
    const table = await freshTable(pool, 'cron_ok')
    const coordinator = leaseCoordinator(pool, { table })
    const { row } = await recordedRuns(
      table,
      coordinator,
      'report:ok',
      () => {},
      (task) => assert.equal(coordinator.watch(task), task, 'watch returns the task'),
      finished,
    )
    assert.equal(row.last_outcome, 'ok')
    assert.equal(row.last_error, null)
    assert.ok(row.last_success_at instanceof Date, 'last_success_at is set')
    assert.equal(row.last_success_at.getTime(), row.last_finished_at!.getTime())
  })

  test("a watched task's run that throws is recorded error with the error's first line, and no success", async () => {
    const table = await freshTable(pool, 'cron_err')
    const coordinator = leaseCoordinator(pool, { table })
    const { row } = await recordedRuns(
      table,
      coordinator,
      'report:fails',
      () => {
        throw new RangeError('quota exceeded\nat the second line')
      },
      (task) => coordinator.watch(task),
      finished,
    )
    assert.equal(row.last_outcome, 'error')
    assert.equal(row.last_error, 'RangeError: quota exceeded')
    assert.equal(row.last_success_at, null)
  })

  test('a failure marks only its own run: a watched task that throws once and then returns ends ok', async () => {
    const table = await freshTable(pool, 'cron_mixed')
    const coordinator = leaseCoordinator(pool, { table })
    const outcomes: (string | null)[] = []
    const { row, fires } = await recordedRuns(
      table,
      coordinator,
      'report:recovers',
      (fire) => {
        if (fire === 1) throw new Error('first run fails')
      },
      (task) => coordinator.watch(task),
      (seen) => {
        if (seen.last_outcome !== outcomes.at(-1)) outcomes.push(seen.last_outcome)
        return seen.last_outcome === 'ok'
      },
    )
    assert.ok(fires >= 2, `${fires} fires`)
    assert.deepEqual(
      outcomes.filter((o) => o !== null),
      ['error', 'ok'],
      `outcomes seen: ${outcomes.join(', ')}`,
    )
    assert.equal(row.last_error, null)
    assert.ok(row.last_success_at !== null)
  })

  test('a task that is not watched is recorded with no outcome, whether it returns or throws', async () => {
    const table = await freshTable(pool, 'cron_unwatched')
    const coordinator = leaseCoordinator(pool, { table })
    for (const [name, body] of [
      ['report:unwatched-ok', () => {}],
      [
        'report:unwatched-throws',
        () => {
          throw new Error('nobody hears this')
        },
      ],
    ] as const) {
      const { row } = await recordedRuns(table, coordinator, name, body, () => {}, finished)
      assert.deepEqual([row.last_outcome, row.last_error, row.last_success_at], [null, null, null], name)
    }
  })

  test('watching one task of a shared coordinator leaves the others unknown', async () => {
    const table = await freshTable(pool, 'cron_shared')
    const coordinator = leaseCoordinator(pool, { table })
    const watchedRun = recordedRuns(
      table,
      coordinator,
      'shared:watched',
      () => {},
      (t) => coordinator.watch(t),
      finished,
    )
    const unwatchedRun = recordedRuns(
      table,
      coordinator,
      'shared:unwatched',
      () => {},
      () => {},
      finished,
    )
    const [watched, unwatched] = await Promise.all([watchedRun, unwatchedRun])
    assert.equal(watched.row.last_outcome, 'ok')
    assert.equal(unwatched.row.last_outcome, null)
  })

  test('onExecutionFailed subscribed by hand records failures, but a run without one stays unknown', async () => {
    const table = await freshTable(pool, 'cron_by_hand')
    const coordinator = leaseCoordinator(pool, { table })
    const byHand = (task: ScheduledTask) => task.on('execution:failed', coordinator.onExecutionFailed)
    const failing = await recordedRuns(
      table,
      coordinator,
      'by-hand:fails',
      () => {
        throw new Error('heard')
      },
      byHand,
      finished,
    )
    assert.deepEqual([failing.row.last_outcome, failing.row.last_error], ['error', 'Error: heard'])
    const passing = await recordedRuns(table, coordinator, 'by-hand:ok', () => {}, byHand, finished)
    assert.equal(passing.row.last_outcome, null)
  })

  test('on a table of the original shape, a watched task runs and warns once, and no statement names a missing column', async () => {
    const table = `original_${Math.random().toString(16).slice(2, 10)}`
    await pool.query(`CREATE TABLE "${table}" (job_name TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL,
      holder TEXT, claimed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())`)
    const sent: string[] = []
    const counted = {
      query: (text: string, params?: unknown[]) => {
        sent.push(text)
        return pool.query(text, params)
      },
    }
    const warnings: string[] = []
    const coordinator = leaseCoordinator(counted, {
      table,
      leaseMs: 500,
      logger: { warn: (m) => void warnings.push(m) },
    })
    let fires = 0
    const task = coordinator.watch(
      cron.schedule('* * * * * *', () => void fires++, {
        name: 'original:watched',
        distributed: true,
        runCoordinator: coordinator,
        logger: silent,
      }),
    )
    try {
      const deadline = Date.now() + 8000
      while (fires < 2) {
        assert.ok(Date.now() < deadline, `two runs within 8 s (${fires})`)
        await sleep(100)
      }
      await sleep(200)
    } finally {
      await task.destroy()
    }
    assert.equal(warnings.length, 1, warnings.join('\n'))
    assert.match(warnings[0]!, new RegExp(`${table} has the original shape.*pg-cron-lease migrate --table ${table}`))
    // The table's facts, read once, then the original claim and nothing else.
    assert.equal(sent[0], TABLE_FACTS_SQL)
    const claims = sent.slice(1)
    assert.ok(claims.length >= 2, `${claims.length} claims`)
    assert.equal(new Set(claims).size, 1, 'every statement after the facts was the same one, the claim')
    assert.match(claims[0]!, /^\s*INSERT INTO/)
  })

  test('watch refuses what is not a node-cron task, naming the argument, before any query', () => {
    const coordinator = leaseCoordinator(pool)
    const cases: [unknown, RegExp][] = [
      [null, /^pg-cron-lease: task must be a node-cron task .*got null$/],
      [{ name: 'report' }, /^pg-cron-lease: task must be a node-cron task .*got /],
      [{ name: '', on() {} }, /^pg-cron-lease: task\.name must be a non-empty string, got ""$/],
      [{ on() {} }, /^pg-cron-lease: task\.name must be a non-empty string, got undefined$/],
    ]
    for (const [value, message] of cases) {
      assert.throws(
        () => coordinator.watch(value as never),
        (error: unknown) => error instanceof TypeError && message.test(error.message),
        String(message),
      )
    }
  })
})
