/**
 * `npm run bench -- --quick` runs end to end and writes what it promises: a JSON file and an SVG
 * chart, with every target PASS, FAIL or, for a part that could not run, not measured. Timings are
 * never asserted (the machine is shared); what is asserted is what does not depend on speed: every
 * race and fleet job had exactly one winner, every plain-upsert loser locked the row and the
 * library's losers almost never did, the PgBouncer claims ran after the fallback, which patterns
 * hold a connection while the tick runs, and that a previous build's run (`--previous FILE`) is
 * read into the targets that compare builds, or the build itself (`--previous DIR`) measured with
 * this one.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, test } from 'node:test'
import { pathToFileURL } from 'node:url'
import { pgbouncerMissing, pgbouncerVersion } from '../../dev/pgbouncer.ts'
import { CI, testDatabaseUrl } from '../../dev/postgres.ts'
import { finished } from '../helpers/child.ts'

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

/** `npm run bench -- --quick` on the source, its results written to `json` and `svg`, compared with `previous`. */
async function quickBench(
  json: string,
  svg: string,
  previous: string,
): Promise<{ code: number | null; output: string }> {
  // --source: the bench measures src/, so the suite needs no build.
  const args = ['bench/bench.ts', '--quick', '--source', '--json', json, '--svg', svg, '--previous', previous]
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], {
    env: { ...process.env, DATABASE_URL: await testDatabaseUrl() },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const { code, stdout, stderr } = await finished(child)
  return { code, output: stdout + stderr }
}

describe('the benchmark runs and writes its results', () => {
  test('--quick writes a JSON report and an SVG chart of the ratios', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-bench-'))
    try {
      const json = path.join(dir, 'results.json')
      const svg = path.join(dir, 'chart.svg')
      // A previous build's run as its bench writes it, reduced to the rows and fleet rounds the
      // cross-build targets read.
      const previous = path.join(dir, 'previous.json')
      const previousRow = (id: string, label: string, p50: number, ratio: number) => ({
        id,
        label,
        p50,
        ratio: { p50: ratio },
      })
      writeFileSync(
        previous,
        JSON.stringify({
          meta: { date: '2026-01-01T00:00:00.000Z', library: 'dist/index.mjs', profile: 'full' },
          rows: [
            previousRow('select1', 'SELECT 1', 0.13, 1),
            previousRow('claim_lose', 'claim, losing', 0.17, 1.3),
            previousRow('claim_win', 'claim, winning', 0.48, 3.7),
            previousRow('claim_win_recorded', 'claim, winning, then its outcome recorded (default)', 0.85, 6.5),
            previousRow('bouncer_claim_lose', 'claim, losing, through PgBouncer (fallen back)', 0.38, 2.9),
          ],
          fleet: { lease: { claimsPerSec: 6800 }, occurrence: { claimsPerSec: 6700 }, floor: { claimsPerSec: 10_000 } },
        }),
      )
      const { code, output } = await quickBench(json, svg, previous)
      assert.equal(code, 0, output)
      assert.match(output, /^(PASS|FAIL) {2}losing claim/m, 'the targets are printed')
      assert.match(output, /^this build \(src\/index\.ts, quick\) beside the previous build/m, 'both runs side by side')
      assert.doesNotMatch(output, /NOT EXISTS/, 'the comparison claim built from the claim text is gone')

      const report = JSON.parse(readFileSync(json, 'utf8'))
      assert.equal(report.meta.profile, 'quick')
      assert.equal(report.meta.unexpectedOutcomes, 0)
      assert.equal(report.meta.library, path.join('src', 'index.ts'), 'the suite measures the source')
      const ids = report.rows.map((r: { id: string }) => r.id)
      for (const id of [
        'select1',
        'claim_win',
        'claim_lose',
        'claim_lose_occurrence',
        'claim_lose_otel',
        'renew',
        'plain_win',
        'plain_lose',
        'advisory',
      ]) {
        assert.ok(ids.includes(id), `the report has a row for ${id}`)
      }
      for (const id of ['claim_lose_statement', 'claim_lose_occurrence_ran', 'select_held']) {
        assert.ok(ids.includes(id), `the report has the diagnostic row ${id}`)
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
      for (const row of report.rows.filter((r: { unit: string }) => r.unit !== 'round')) {
        assert.ok(row.clientCpuUsPerOp > 0, `${row.id}: its client CPU per operation was read`)
      }
      // The losing claim with pg-cron-lease/otel off, on and off again, each in every round.
      assert.equal(report.otel.rounds, 4)
      for (const side of ['off', 'on', 'again']) {
        assert.ok(Number.isFinite(report.otel[side]) && report.otel[side] > 0, `otel.${side} is a positive number`)
      }
      const otelTarget = report.targets.find((t: { id: string }) => t.id === 'losing_claim_otel')
      assert.match(
        otelTarget.value,
        /^\d+\.\d{3}× \(the median of 4 rounds .* µs per claim in all\); noise band ±\d+\.\d%/,
      )
      assert.equal(report.otel.perRound.length, 4, 'each round of the instrumentation row is kept')
      for (const race of report.rows.filter((r: { id: string }) => r.id.startsWith('race'))) {
        assert.equal(race.extra.violations, 0, `${race.id}: no round had two winners`)
        assert.equal(race.extra.emptyRounds, 0, `${race.id}: every round had a winner`)
      }
      assert.deepEqual(
        [...new Set(report.fleet.rounds.map((f: { kind: string }) => f.kind))].sort(),
        ['floor', 'lease', 'occurrence', 'plain'],
        'the fleet rounds: the library lease-only and naming occurrences, the plain upsert, and the floor',
      )
      for (const kind of ['lease', 'plain', 'occurrence', 'floor']) {
        const f = report.fleet[kind]
        assert.equal(f.winners, f.jobs, `the fleet: one winner per job (${kind})`)
        assert.ok(Number.isInteger(f.lockstepLosers) && f.lockstepLosers >= 0, `${kind}: lockstep losers counted`)
      }
      const { lease, plain, occurrence } = report.fleet
      assert.ok(plain.lockstepLosers >= plain.claims - plain.winners, 'every plain-upsert loser locked the row')
      // A loser stops at the probe's read, or its claim skips a row a racing claim holds: at most
      // one in ten of its losers locks a row (a loser that reached the row just as the winner
      // committed), against every plain-upsert loser.
      for (const [kind, f] of [
        ['lease-only', lease],
        ['naming an occurrence', occurrence],
      ] as const) {
        assert.ok(
          f.lockstepLosers * 10 <= f.claims - f.winners,
          `${kind}: the probe and SKIP LOCKED spare its losers the lock (${f.lockstepLosers} of ${f.claims - f.winners} locked)`,
        )
      }
      assert.equal(report.connectionsHeld.advisory, 1, 'the advisory pattern holds a connection during the tick')
      assert.equal(report.connectionsHeld.claim_win, 0, 'the lease holds no connection during the tick')

      assert.deepEqual(
        report.targets.map((t: { id: string }) => t.id),
        [
          'losing_claim',
          'losing_claim_occurrence',
          'losing_claim_vs_previous',
          'losing_claim_cpu_vs_previous',
          'losing_claim_occurrence_vs_previous',
          'losing_claim_otel',
          'losing_claim_pgbouncer',
          'losing_claim_pgbouncer_vs_previous',
          'winning_claim',
          'winning_claim_vs_previous',
          'winning_claim_cpu_vs_previous',
          'record_vs_previous',
          'history_write_age',
          'history_rows',
          'fleet_share',
          'fleet_cpu',
          'fleet_share_occurrence',
          'fleet_cpu_occurrence',
        ],
      )
      assert.equal(report.previous.file, previous, 'the previous run is named in the report')
      assert.match(
        output,
        /^ {2}fleet, lease-only: share of the floor round +\d+\.\d% +68\.0%$/m,
        'both shares printed',
      )
      // The history write: one job's runs, the window timed in turn with young jobs', its rows trimmed.
      const { history } = report
      assert.equal(history.runs, 2_000)
      assert.equal(history.late.samples, 200, 'the late window: one record per run')
      assert.equal(history.young.samples, 110, 'young jobs: runs 5 to 15 of ten jobs')
      assert.ok(history.young.p50 > 0 && history.late.p50 > 0)
      assert.equal(history.limit, 120)
      assert.ok(
        history.rows >= 100 && history.rows <= history.limit,
        `the job keeps its newest 100 runs and at most 20 more failed ones (${history.rows})`,
      )
      const missing = pgbouncerMissing()
      const version = pgbouncerVersion()
      const keepsPrepared = version !== null && (version[0] > 1 || version[1] >= 21)
      for (const target of report.targets) {
        const bouncerTarget =
          target.id === 'losing_claim_pgbouncer' || target.id === 'losing_claim_pgbouncer_vs_previous'
        if (bouncerTarget && missing !== null) {
          // Locally the bench may run without PgBouncer, and says so; under CI it must not.
          assert.equal(CI, false, `CI=true requires PgBouncer for the bench: ${missing}`)
          assert.equal(target.pass, null)
          assert.match(target.value, /^not measured: /)
          assert.match(output, /PgBouncer: not measured: pgbouncer is not installed/)
        } else if (bouncerTarget && keepsPrepared && target.pass === null) {
          // A PgBouncer that keeps prepared statements never refuses one: there is no fallback to time.
          assert.match(target.value, /^not measured: .*never refused a prepared statement/)
        } else if (target.id.startsWith('fleet_cpu') && report.meta.server === 'DATABASE_URL') {
          // The server's processes are read from its data directory, which a URL does not give.
          assert.equal(target.pass, null)
          assert.match(target.value, /^not measured: the server is not local/)
        } else if (target.id.endsWith('_cpu_vs_previous')) {
          // A previous run read from its JSON file carries no client CPU: only --previous DIR measures it.
          assert.equal(target.pass, null)
          assert.match(target.value, /^not measured: the previous build was not measured in this run/)
        } else assert.equal(typeof target.pass, 'boolean', `${target.id} was measured`)
      }
      if (missing === null && !keepsPrepared) {
        assert.equal(report.pgbouncer.measured, true, 'the PgBouncer pool fell back before its claims were timed')
      }
      if (report.pgbouncer.measured) {
        for (const id of ['bouncer_select1', 'bouncer_claim_lose', 'bouncer_claim_lose_unprepared']) {
          assert.ok(ids.includes(id), `the report has a row for ${id}`)
        }
      }

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

  test('--previous DIR measures that build in the same run, beside a copy of this one, for the targets that compare builds', {
    timeout: 300_000,
  }, async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-bench-previous-'))
    try {
      // A stand-in for a checkout of the previous build: its dist/index.mjs is this source.
      mkdirSync(path.join(dir, 'dist'))
      const source = pathToFileURL(path.resolve('src/index.ts')).href
      writeFileSync(path.join(dir, 'dist', 'index.mjs'), `export * from ${JSON.stringify(source)}\n`)
      const json = path.join(dir, 'results.json')
      const { code, output } = await quickBench(json, path.join(dir, 'chart.svg'), dir)
      assert.equal(code, 0, output)
      assert.match(output, /^comparing with the previous build, .*measured in this run beside this one$/m)
      const report = JSON.parse(readFileSync(json, 'utf8'))
      assert.equal(report.meta.unexpectedOutcomes, 0)
      assert.match(report.previous.library, /dist\/index\.mjs, measured in this run$/)
      const ids = (rows: Array<{ id: string }>) => rows.map((r) => r.id).sort()
      const compared = ['claim_lose', 'claim_lose_occurrence', 'claim_win', 'claim_win_recorded']
      for (const side of [report.previous.rows, report.previous.beside]) {
        for (const id of compared) assert.ok(ids(side).includes(id), `both builds have the row ${id}`)
        for (const row of side) assert.ok(row.p50 > 0 && row.ratio.p50 > 0, `${row.id} was timed`)
      }
      assert.ok(
        report.rows.every((r: { id: string }) => !r.id.includes(':')),
        "the compared copies are not in this build's own rows",
      )
      const { lease, occurrence, floor } = report.previous.fleet
      assert.ok(lease > 0 && occurrence > 0, "the previous build's fleet rounds ran")
      assert.equal(floor, report.fleet.floor.claimsPerSec, 'both shares are of the same floor round')
      for (const row of report.previous.rows.filter((r: { id: string }) => compared.includes(r.id))) {
        assert.ok(row.clientCpuUsPerOp > 0, `the previous build's ${row.id} has its client CPU`)
      }
      const measured = ['losing_claim_vs_previous', 'losing_claim_cpu_vs_previous', 'winning_claim_vs_previous']
      const others = ['losing_claim_occurrence_vs_previous', 'winning_claim_cpu_vs_previous', 'record_vs_previous']
      for (const id of [...measured, ...others, 'fleet_share']) {
        const target = report.targets.find((t: { id: string }) => t.id === id)
        assert.equal(typeof target.pass, 'boolean', `${id} was measured: ${target.value}`)
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('bench:shapes --quick runs every claim shape, each job won once a round', { timeout: 120_000 }, async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'bench/shapes.ts', '--quick'], {
      env: { ...process.env, DATABASE_URL: await testDatabaseUrl() },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const { code, stdout, stderr } = await finished(child)
    assert.equal(code, 0, stdout + stderr)
    for (const line of ['the probe', 'guarded, occurrence', 'packed, occurrence', 'counted', 'the claim alone']) {
      assert.match(stdout, new RegExp(`^ {2}${line} +\\d`, 'm'), `a row for ${line}`)
    }
    // A round that did not end with one winner a job throws, so the round's line is its proof.
    assert.match(stdout, /^ {2}round 1: plain \d+ .*guarded function \d+ .*packed function \d+ .*floor \d+/m)
  })
})
