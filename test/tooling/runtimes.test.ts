/**
 * The verdict `.ci/run` passes on the race under Bun and Deno (scripts/runtimes.ts): it must fail
 * on every way the race can go wrong, or the step proves nothing.
 */
import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { describe, test } from 'node:test'
import { judgeRace, type RaceReport, RUNTIMES } from '../../dev/runtimes.ts'

const won = (name: string) => ({ winners: [name], runs: 1, holder: name })
const report = (changes: Partial<RaceReport> = {}): string =>
  `${JSON.stringify({ runtime: 'bun 1.4.5', claimants: 10, rounds: [won('claimant-3'), won('claimant-9')], ...changes })}\n`

describe('the race under another runtime passes only with one winner a round, under that runtime', () => {
  test('one winner, one run and its name in the row, each round: no problem', () => {
    assert.deepEqual(judgeRace('bun', report()), [])
  })

  test('a round with two winners, or none, fails and names the round', () => {
    const rounds = [won('claimant-1'), { winners: ['claimant-2', 'claimant-5'], runs: 2, holder: 'claimant-5' }]
    assert.deepEqual(judgeRace('bun', report({ rounds })), [
      'round 2: 2 winners (claimant-2, claimant-5)',
      'round 2: the tick ran 2 times',
    ])
    assert.deepEqual(judgeRace('bun', report({ rounds: [{ winners: [], runs: 0, holder: 'claimant-4' }] })), [
      'round 1: 0 winners (none)',
      'round 1: the tick ran 0 times',
    ])
  })

  test('a winner the row does not name fails', () => {
    const rounds = [{ winners: ['claimant-2'], runs: 1, holder: 'claimant-6' }]
    assert.deepEqual(judgeRace('bun', report({ rounds })), [
      'round 1: the row names claimant-6, the winner was claimant-2',
    ])
  })

  test('a race run by another runtime (a shim that fell back to Node) fails', () => {
    assert.deepEqual(judgeRace('deno', report()), ['ran under "bun 1.4.5", not deno'])
    assert.deepEqual(judgeRace('bun', report({ runtime: 'node 20.20.2' })), ['ran under "node 20.20.2", not bun'])
  })

  test('fewer claimants, no rounds, or no report at all fails', () => {
    assert.deepEqual(judgeRace('bun', report({ claimants: 1 })), ['1 claimants, not 10'])
    assert.deepEqual(judgeRace('bun', report({ rounds: [] })), ['no rounds were raced'])
    assert.match(judgeRace('bun', 'Segmentation fault\n')[0]!, /^no report/)
    assert.match(judgeRace('bun', '')[0]!, /^no report/)
  })

  test('.ci/run runs the race under both runtimes', async () => {
    const ci = await readFile('.ci/run', 'utf8')
    assert.match(ci, /^npm run test:runtimes$/m)
    const pkg = JSON.parse(await readFile('package.json', 'utf8')) as { scripts: Record<string, string> }
    assert.equal(pkg.scripts['test:runtimes'], 'node --import tsx scripts/runtimes.ts')
    assert.deepEqual(
      RUNTIMES.map((r) => r.name),
      ['bun', 'deno'],
    )
  })

  test('the runtimes are pinned to exact versions, as docs/compatibility.md lists them', async () => {
    const doc = await readFile('docs/compatibility.md', 'utf8')
    for (const { spec } of RUNTIMES) {
      assert.match(spec, /^[a-z]+@\d+\.\d+\.\d+$/)
      const [name, version] = spec.split('@') as [string, string]
      const shown = `${name[0]!.toUpperCase()}${name.slice(1)} ${version}`
      assert.ok(doc.includes(shown), `docs/compatibility.md names ${shown}`)
    }
  })
})
