/**
 * `npm run bench -- --quick` runs end to end and writes what it promises: a JSON file and an SVG
 * chart. Timings are never asserted (the machine is shared); what is asserted is what does not
 * depend on speed: every race and fleet job had exactly one winner, and which patterns hold a
 * connection while the tick runs.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, test } from 'node:test'
import { finished } from '../helpers/child.ts'
import { testDatabaseUrl } from '../helpers/postgres.ts'

/** Tags open and close in order (a small well-formedness check; the chart has no comments or CDATA). */
function assertBalancedTags(svg: string): void {
  const stack: string[] = []
  for (const [, closing, name, selfClosing] of svg.matchAll(/<(\/?)([a-zA-Z]+)[^>]*?(\/?)>/g)) {
    if (selfClosing) continue
    if (closing) assert.equal(stack.pop(), name, `</${name}> closes the wrong element`)
    else stack.push(name!)
  }
  assert.deepEqual(stack, [], 'every element is closed')
}

describe('the benchmark runs and writes its results', () => {
  test('--quick writes a JSON report and an SVG chart of the ratios', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-bench-'))
    try {
      const json = path.join(dir, 'results.json')
      const svg = path.join(dir, 'chart.svg')
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'bench/bench.ts', '--quick', '--json', json, '--svg', svg],
        {
          env: { ...process.env, DATABASE_URL: await testDatabaseUrl() },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      )
      const { code, stdout, stderr } = await finished(child)
      const output = stdout + stderr
      assert.equal(code, 0, output)
      assert.match(output, /^(PASS|FAIL) {2}losing claim/m, 'the targets are printed')

      const report = JSON.parse(readFileSync(json, 'utf8'))
      assert.equal(report.meta.profile, 'quick')
      assert.equal(report.meta.unexpectedOutcomes, 0)
      const ids = report.rows.map((r: { id: string }) => r.id)
      for (const id of ['select1', 'claim_win', 'claim_lose', 'renew', 'plain_win', 'plain_lose', 'advisory']) {
        assert.ok(ids.includes(id), `the report has a row for ${id}`)
      }
      for (const id of ['shedlock_lose_first', 'race10_lease', 'race50_lease', 'race10_plain', 'race50_plain']) {
        assert.ok(ids.includes(id), `the report has a row for ${id}`)
      }
      for (const row of report.rows) {
        for (const key of ['p50', 'p90', 'p99', 'opsPerSec']) {
          assert.ok(Number.isFinite(row[key]) && row[key] > 0, `${row.id}.${key} is a positive number`)
          assert.ok(
            Number.isFinite(row.ratio[key]) && row.ratio[key] > 0,
            `${row.id}.ratio.${key} is a positive number`,
          )
        }
      }
      const select1 = report.rows.find((r: { id: string }) => r.id === 'select1')
      assert.equal(select1.ratio.p50, 1)
      for (const race of report.rows.filter((r: { id: string }) => r.id.startsWith('race'))) {
        assert.equal(race.extra.violations, 0, `${race.id}: no round had two winners`)
        assert.equal(race.extra.emptyRounds, 0, `${race.id}: every round had a winner`)
      }
      assert.equal(report.fleet.lease.winners, report.fleet.lease.jobs, 'the fleet: one winner per job (library)')
      assert.equal(report.fleet.plain.winners, report.fleet.plain.jobs, 'the fleet: one winner per job (plain upsert)')
      assert.equal(report.connectionsHeld.advisory, 1, 'the advisory pattern holds a connection during the tick')
      assert.equal(report.connectionsHeld.claim_win, 0, 'the lease holds no connection during the tick')
      assert.equal(report.targets.length, 3)
      for (const target of report.targets) assert.equal(typeof target.pass, 'boolean')

      const chart = readFileSync(svg, 'utf8')
      assert.match(chart, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" width="\d+" height="\d+"/)
      assert.match(chart, /<\/svg>\n$/)
      assert.match(chart, /<title>pg-cron-lease benchmark, Postgres [^<]+<\/title>/, 'the chart has a text alternative')
      assertBalancedTags(chart)
      assert.ok((chart.match(/<rect /g) ?? []).length >= report.rows.length + 2, 'a bar per row and per fleet result')
      assert.match(chart, /claim, losing/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
