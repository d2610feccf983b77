/**
 * One truth about every run: a run killed mid-tick reads as died in every reader once its lease has
 * ended (listRuns, listLeases, status, check, the Prometheus text, the Terminus indicator, the
 * dashboard's API and health), and as ok again in every one after the next run ends ok. Runs that
 * finished, but record nothing (record: false, the original package), never read as died.
 */
import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { withCronLease as originalWithCronLease } from 'pg-cron-lease-original'
import { expireLease, freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import { main } from '../../../src/cli/main.ts'
import { createDashboard } from '../../../src/dashboard/index.ts'
import { type LeaseInfo, listLeases, listRuns, withCronLease } from '../../../src/index.ts'
import { PgCronLeaseHealthIndicator } from '../../../src/nestjs/health.ts'
import { dyingReplica } from '../../helpers/child.ts'
import { parseExposition } from '../../helpers/prometheus.ts'

let pool: pg.Pool
let table: string
let url: string
let server: http.Server
let base: string
let job = 0
// Declared by every claim below, so no job reads as overdue from an interval observed between test steps.
const HOUR = 3_600_000
const nextJob = () => `truth-${++job}`

before(async () => {
  pool = await testPool()
  table = await freshTable(pool, 'truth')
  url = await testDatabaseUrl()
  server = http.createServer(createDashboard({ db: pool, table }))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
after(async () => {
  await new Promise((resolve) => server.close(resolve))
  await pool.end()
})

/** Runs the command in-process against the test database; its exit code and what it printed. */
async function cli(...args: string[]): Promise<{ code: number; stdout: string }> {
  let stdout = ''
  const out = { write: (text: string) => (stdout += text) }
  const code = await main([...args, '--table', table, '--url', url], { stdout: out, stderr: out, env: {} })
  return { code, stdout }
}

async function leaseOf(jobName: string): Promise<LeaseInfo> {
  const found = (await listLeases(pool, { table })).find((l) => l.jobName === jobName)
  assert.ok(found, `${jobName} has a row`)
  return found
}

async function json(path: string): Promise<{ status: number; body: any }> {
  const reply = await fetch(`${base}${path}`)
  return { status: reply.status, body: await reply.json() }
}

/** What the Terminus indicator says of one job: 'up' or 'down'. */
async function terminus(jobName: string): Promise<string> {
  const moduleRef = {
    get() {
      throw new Error('no Terminus module in this test: the indicator makes its own service')
    },
  }
  const indicator = new PgCronLeaseHealthIndicator({ db: pool, defaults: { table } } as never, moduleRef as never)
  const result = await indicator.isHealthy('jobs', [jobName])
  return (result.jobs as { status: string }).status
}

/** Every reader's word on one job, read separately. */
async function readers(jobName: string) {
  const [run] = await listRuns(pool, { table, jobName, limit: 1 })
  const lease = await leaseOf(jobName)
  const status = await cli('status')
  const line = status.stdout.split('\n').find((l) => l.startsWith(`${jobName} `)) ?? ''
  const check = await cli('check', '--job', jobName)
  const metrics = parseExposition((await cli('status', '--format', 'prometheus')).stdout)
  const sample = (name: string, outcome?: string) =>
    metrics
      .get(name)
      ?.samples.find((s) => s.labels.job_name === jobName && (outcome === undefined || s.labels.outcome === outcome))
      ?.value
  const jobs = await json('/api/jobs')
  const health = await json('/healthz')
  const runs = await json(`/api/jobs/${encodeURIComponent(jobName)}/runs`)
  const history = await cli('history', '--job', jobName)
  return {
    run,
    lease,
    status: { text: status.stdout, line },
    check,
    prometheus: {
      unfinished: sample('pg_cron_lease_last_outcome', 'unfinished'),
      ok: sample('pg_cron_lease_last_outcome_ok'),
      died: sample('pg_cron_lease_unfinished_runs_total'),
    },
    terminus: await terminus(jobName),
    api: (jobs.body as LeaseInfo[]).find((l) => l.jobName === jobName),
    health,
    apiRuns: runs.body,
    history: history.stdout,
  }
}

describe('a run killed mid-tick reads as died in every reader, until the next run ends ok', () => {
  test('SIGKILL mid-tick: running while its lease holds, died once it ended, ok again after an ok run', {
    timeout: 60_000,
  }, async () => {
    const name = nextJob()
    const occurrence = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 60_000)
    await withCronLease(pool, name, 1, () => 'first', { table, holder: 'before', everyMs: HOUR })
    await expireLease(pool, table, name)

    const { child, exit } = await dyingReplica({ table, job: name, occurrence, leaseMs: 60_000, url })

    // In flight: visible from its claim, with its holder and occurrence.
    const running = await readers(name)
    assert.deepEqual([running.run?.outcome, running.run?.holder], ['running', 'dying'])
    assert.equal(running.run?.occurrence, occurrence.toISOString().replace('Z', '000Z'))
    assert.equal(running.lease.lastOutcome, 'running')
    assert.equal(running.apiRuns[0]?.outcome, 'running', '/api/jobs/:name/runs')
    assert.equal(running.check.code, 0, 'a run in flight after an ok one is healthy')

    child.kill('SIGKILL')
    assert.equal((await exit).signal, 'SIGKILL')
    await expireLease(pool, table, name)

    const died = await readers(name)
    assert.equal(died.run?.outcome, 'unfinished', 'listRuns')
    assert.equal(died.lease.lastOutcome, 'unfinished', 'listLeases lastOutcome')
    assert.equal(died.lease.lastEndedOutcome, 'unfinished')
    assert.match(died.lease.lastError ?? '', /dying/, 'the error names the holder')
    assert.match(died.status.line, /unfinished .* DIED$/, `status: ${died.status.line}`)
    assert.match(died.status.text, new RegExp(`${name}: the run of dying had not ended when its lease ran out`))
    assert.equal(died.check.code, 3, 'check exits 3')
    assert.match(died.check.stdout, new RegExp(`^${name}: DIED: `))
    assert.equal(died.prometheus.unfinished, 1, 'pg_cron_lease_last_outcome{outcome="unfinished"}')
    assert.equal(died.prometheus.ok, 0, 'pg_cron_lease_last_outcome_ok')
    assert.equal(died.prometheus.died, 1, 'pg_cron_lease_unfinished_runs_total')
    assert.equal(died.terminus, 'down', 'the Terminus indicator')
    assert.equal(died.api?.lastOutcome, 'unfinished', '/api/jobs')
    assert.equal(died.health.status, 503, '/healthz')
    assert.equal(
      died.health.body.jobs.find((j: { jobName: string }) => j.jobName === name)?.died,
      true,
      '/healthz names the job as died',
    )
    assert.match(died.history, /dying\s+-\s+unfinished/, 'pg-cron-lease history')

    const next = await withCronLease(pool, name, 1, () => 'again', { table, holder: 'after', everyMs: HOUR })
    assert.equal(next.ran, true)
    const ok = await readers(name)
    assert.equal(ok.run?.outcome, 'ok')
    assert.equal(ok.lease.lastOutcome, 'ok')
    assert.equal(ok.lease.lastEndedOutcome, 'ok')
    assert.doesNotMatch(ok.status.line, /DIED|FAILING/)
    assert.equal(ok.check.code, 0, 'check exits 0 again')
    assert.equal(ok.prometheus.unfinished, 0)
    assert.equal(ok.prometheus.ok, 1)
    assert.equal(ok.prometheus.died, 1, 'the counter keeps the run that died')
    assert.equal(ok.terminus, 'up')
    assert.equal(ok.api?.lastOutcome, 'ok')
    assert.deepEqual(
      (await listRuns(pool, { table, jobName: name })).map((r) => [r.holder, r.outcome]),
      [
        ['after', 'ok'],
        ['dying', 'unfinished'],
        ['before', 'ok'],
      ],
    )
  })

  test('a run after one that died keeps the job DIED until it ends ok', async () => {
    const name = nextJob()
    const dying = withCronLease(pool, name, 30, () => new Promise(() => {}), { table, holder: 'lost', everyMs: HOUR })
    void dying
    await new Promise((resolve) => setTimeout(resolve, 50))
    let release!: () => void
    const next = withCronLease(pool, name, 60_000, () => new Promise<void>((resolve) => (release = resolve)), {
      table,
      holder: 'next',
      everyMs: HOUR,
    })
    while (release === undefined) await new Promise((resolve) => setTimeout(resolve, 5))
    const lease = await leaseOf(name)
    assert.deepEqual([lease.lastOutcome, lease.lastEndedOutcome], ['running', 'unfinished'])
    assert.equal((await cli('check', '--job', name)).code, 3, 'still DIED while the next run runs')
    release()
    await next
    assert.equal((await cli('check', '--job', name)).code, 0)
  })
})

describe('runs that finished but record nothing never read as died', () => {
  test("the original package's replica ×3 in a mixed fleet, then ours: no reader says unfinished or failing", async () => {
    const name = nextJob()
    await withCronLease(pool, name, 1, () => 1, { table, holder: 'ours-first', everyMs: HOUR })
    for (let i = 0; i < 3; i++) {
      await expireLease(pool, table, name)
      const ran = await originalWithCronLease(pool, name, 1, async () => 'original', { table })
      assert.equal(ran.ran, true, 'the original package claimed')
      const seen = await readers(name)
      assert.notEqual(seen.lease.lastOutcome, 'unfinished')
      assert.equal(seen.check.code, 0, seen.check.stdout)
      assert.deepEqual(
        (await listRuns(pool, { table, jobName: name })).map((r) => r.outcome),
        ['ok'],
        'its claims are not runs of the history',
      )
    }
    await expireLease(pool, table, name)
    await withCronLease(pool, name, 1, () => 1, { table, holder: 'ours-after', everyMs: HOUR })
    const seen = await readers(name)
    assert.equal(seen.lease.lastOutcome, 'ok')
    assert.equal(seen.check.code, 0)
    assert.equal(seen.prometheus.died, 0)
    assert.equal(seen.health.status, 200)
    assert.deepEqual(
      (await listRuns(pool, { table, jobName: name })).map((r) => [r.holder, r.outcome]),
      [
        ['ours-after', 'ok'],
        ['ours-first', 'ok'],
      ],
    )
  })

  test('record: false ×3, then a recorded run: no reader says unfinished or failing', async () => {
    const name = nextJob()
    for (let i = 0; i < 3; i++) {
      await withCronLease(pool, name, 1, () => 1, { table, record: false, everyMs: HOUR })
      await expireLease(pool, table, name)
      const seen = await readers(name)
      assert.equal(seen.check.code, 0, seen.check.stdout)
      assert.equal(seen.lease.lastOutcome, null)
    }
    await withCronLease(pool, name, 1, () => 1, { table, everyMs: HOUR })
    const seen = await readers(name)
    assert.equal(seen.lease.lastOutcome, 'ok')
    assert.equal(seen.check.code, 0)
    assert.equal(seen.health.status, 200)
    assert.deepEqual(
      (await listRuns(pool, { table, jobName: name })).map((r) => r.outcome),
      ['ok'],
    )
  })
})
