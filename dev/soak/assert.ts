import assert from 'node:assert/strict'
import { formatReport } from './check.ts'
import type { SoakResult } from './run.ts'

/**
 * What the short soak must show, shared with the PgBouncer suite: no duplicate, no miss that no
 * fault explains, no claim error, and proof that the faults really happened.
 */
export function assertCleanSoak(result: SoakResult): void {
  const { report } = result
  const table = `\n${formatReport(report)}\nerrors: ${result.errors.join('\n')}`
  assert.equal(report.duplicates, 0, `no two claims of a job closer than its lease${table}`)
  assert.equal(report.missedUnexplained, 0, `every missed occurrence has a fault in its gap${table}`)
  assert.equal(report.shortWindows, 0, `every window ran all but one of its occurrences${table}`)
  assert.deepEqual(result.errors, [], `no claim failed${table}`)
  assert.equal(result.kills.length, 1, 'one replica was killed')
  const unfinished = report.jobs.reduce((n, j) => n + j.unfinished, 0)
  if (result.killedMidTick) assert.ok(unfinished >= 1, `the tick the killed replica was inside is recorded${table}`)
  for (const job of report.jobs) {
    assert.equal(job.threw, 1, `${job.job}: its one planned throw happened${table}`)
    const expected = result.windowMs / job.intervalMs
    assert.ok(job.ran >= expected - 2, `${job.job}: ran ${job.ran} times in a window of ${expected} intervals${table}`)
  }
  const skewedWins = report.jobs.reduce((n, j) => n + (j.byHolder['replica-0#1'] ?? 0), 0)
  assert.ok(skewedWins > 0, `the replica whose clock is hours off won claims too${table}`)
}
