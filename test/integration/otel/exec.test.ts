/**
 * `pg-cron-lease exec` with an OpenTelemetry SDK preloaded into its process (`--import`), as
 * docs/opentelemetry.md sets it up: the real SDK with an in-memory exporter, the bin and
 * pg-cron-lease/otel built into a directory laid out like an installed package, on real Postgres.
 * The run is one span, and the command gets that span's W3C trace context in its environment;
 * without the SDK the command's environment is the caller's.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { build, type UserConfig } from 'tsdown'
import { freshTable, testDatabaseUrl, testPool } from '../../../dev/postgres.ts'
import config from '../../../tsdown.config.ts'
import { finished } from '../../helpers/child.ts'

const ROOT = fileURLToPath(new URL('../../..', import.meta.url))
const TOKEN = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/

// What an application's setup file does, the exporter aside: each finished span is written to a
// file when the process exits, for the test to read.
const SETUP = `
import { writeFileSync } from 'node:fs'
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node'
import { instrumentCronLeases } from './dist/otel.mjs'

const spans = new InMemorySpanExporter()
new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }).register()
instrumentCronLeases()
process.on('exit', () => {
  const finished = spans.getFinishedSpans().map((s) => ({
    name: s.name,
    traceId: s.spanContext().traceId,
    spanId: s.spanContext().spanId,
    attributes: s.attributes,
    status: s.status.code,
  }))
  writeFileSync(process.env.SPANS_FILE, JSON.stringify(finished))
})
`

let pool: pg.Pool
let url: string
let table: string
let installed: string

before(async () => {
  url = await testDatabaseUrl()
  pool = await testPool({}, 1)
  table = await freshTable(pool, 'exec_otel')
  installed = mkdtempSync(path.join(os.tmpdir(), 'pgcl-exec-otel-'))
  const configs = config as UserConfig[]
  const library = configs.find((c) => typeof c.entry === 'object' && 'otel' in (c.entry as object))
  const cli = configs.find((c) => typeof c.entry === 'object' && 'cli' in (c.entry as object))
  assert.ok(library && cli, 'tsdown.config.ts has the otel and cli entries')
  const outDir = path.join(installed, 'dist')
  const common = { config: false, cwd: ROOT, outDir, logLevel: 'error' } as const
  // The otel entry first: its build cleans dist/, the bin's does not.
  await build({ ...library, ...common, entry: { otel: 'src/otel/index.ts' }, format: ['esm'], dts: false })
  await build({ ...cli, ...common })
  copyFileSync(path.join(ROOT, 'package.json'), path.join(installed, 'package.json'))
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(installed, 'node_modules'), 'dir')
  writeFileSync(path.join(installed, 'otel-setup.mjs'), SETUP)
})

after(async () => {
  await pool?.end()
  if (installed) rmSync(installed, { recursive: true, force: true })
})

/** One exec run of `job` whose command writes its environment to a file; its spans, if any, and that environment. */
async function execRun(job: string, env: Record<string, string>) {
  const envFile = path.join(installed, `${job}.env`)
  const spansFile = path.join(installed, `${job}.spans.json`)
  // Every 2 s, within 1 s: whenever it starts, a slot is near enough to run.
  const args = ['exec', '--job', job, '--every', '2s', '--table', table, '--', 'sh', '-c', `env > '${envFile}'`]
  const child = spawn(process.execPath, [path.join(installed, 'dist/cli.mjs'), ...args], {
    cwd: installed,
    env: { ...process.env, DATABASE_URL: url, SPANS_FILE: spansFile, ...env },
  })
  const { code, stdout, stderr } = await finished(child, { killAfterMs: 30_000 })
  assert.equal(code, 0, stdout + stderr)
  const seen = Object.fromEntries(
    readFileSync(envFile, 'utf8')
      .split('\n')
      .filter((line) => line.includes('='))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  )
  const spans = existsSync(spansFile) ? JSON.parse(readFileSync(spansFile, 'utf8')) : null
  return { seen, spans }
}

describe('exec with an OpenTelemetry SDK preloaded', () => {
  test('the run is one span, and the command gets its trace context as TRACEPARENT', async () => {
    const { seen, spans } = await execRun('traced', { NODE_OPTIONS: '--import ./otel-setup.mjs' })
    const runs = spans.filter((s: { name: string }) => s.name === 'run traced')
    assert.equal(runs.length, 1, `one run span: ${JSON.stringify(spans.map((s: { name: string }) => s.name))}`)
    const run = runs[0]
    const a = run.attributes
    assert.equal(a['pg_cron_lease.job'], 'traced')
    assert.equal(a['pg_cron_lease.occurrence'], seen.PG_CRON_LEASE_OCCURRENCE, 'the slot the command was told')
    assert.equal(typeof a['pg_cron_lease.holder'], 'string')
    assert.match(String(a['pg_cron_lease.claim_token']), TOKEN)
    assert.equal(a['pg_cron_lease.catch_up'], false)
    assert.equal(a['pg_cron_lease.outcome'], 'ok')
    const [, traceId, parentId] = TRACEPARENT.exec(seen.TRACEPARENT ?? '') ?? []
    assert.ok(traceId, `the command got a W3C traceparent: ${seen.TRACEPARENT}`)
    assert.equal(traceId, run.traceId, 'the run span’s trace')
    assert.equal(parentId, run.spanId, 'the run span is the parent')
  })

  test('without an SDK the command’s environment is the caller’s: a TRACEPARENT given is passed on as it is', async () => {
    const given = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
    const { seen, spans } = await execRun('untraced', { TRACEPARENT: given })
    assert.equal(spans, null, 'no SDK, no spans file')
    assert.equal(seen.TRACEPARENT, given)
    assert.equal(seen.TRACESTATE, undefined)
  })
})
