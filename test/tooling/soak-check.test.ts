import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import {
  checkHistory,
  checkJob,
  formatReport,
  type JobSpec,
  type KillRecord,
  missedInGap,
  type RunRecord,
} from '../../dev/soak/check.ts'

const I = 1000
const job: JobSpec = { name: 'job', intervalMs: I, leaseMs: 800 }
const T = 1_800_000_000_000 // an arbitrary database time, ms

/** Runs of `job` at the given offsets from T, in intervals; all ran, held by 'a'. */
function runsAt(offsets: number[], outcome: RunRecord['outcome'] = 'ran', holder = 'a'): RunRecord[] {
  return offsets.map((o) => ({ job: 'job', holder, claimedAt: T + o * I, outcome }))
}

const window = (from: number, to: number) => ({ start: T + from * I, end: T + to * I })
const noKills: KillRecord[] = []

describe('duplicates are claims of one job closer together than its lease', () => {
  test('a run every interval has no duplicate and no miss', () => {
    const r = checkJob(job, runsAt([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]), noKills, window(1, 10))
    assert.equal(r.duplicates, 0)
    assert.equal(r.missed, 0)
    assert.equal(r.shortWindows, 0)
    assert.equal(r.minSpacingMs, I)
    assert.equal(r.claims, 13)
  })

  test('two claims half an interval apart are one duplicate, whoever held them', () => {
    const runs = [...runsAt([0, 1, 2, 3]), ...runsAt([2.5], 'ran', 'b')]
    const r = checkJob(job, runs, noKills, window(0, 3))
    assert.equal(r.duplicates, 2, 'the intruder is too close to the run before it and to the one after it')
    assert.equal(r.minSpacingMs, 0.5 * I)
  })

  test('a claim whose tick threw or never finished still counts for duplicates', () => {
    for (const outcome of ['threw', null] as const) {
      const runs = [...runsAt([0, 1, 2]), ...runsAt([1.3], outcome, 'b')]
      assert.equal(checkJob(job, runs, noKills, window(0, 2)).duplicates, 2, `outcome ${outcome}`)
    }
  })

  test('claims exactly one lease apart, or microseconds short of it, are not duplicates', () => {
    const lease = job.leaseMs / I
    assert.equal(checkJob(job, runsAt([0, lease, 2 * lease]), noKills, window(0, 1)).duplicates, 0)
    const shortByMicros = runsAt([0]).concat({ job: 'job', holder: 'a', claimedAt: T + 800 - 0.005, outcome: 'ran' })
    assert.equal(checkJob(job, shortByMicros, noKills, window(0, 1)).duplicates, 0)
    const shortBy2ms = runsAt([0]).concat({ job: 'job', holder: 'a', claimedAt: T + 798, outcome: 'ran' })
    assert.equal(checkJob(job, shortBy2ms, noKills, window(0, 1)).duplicates, 1)
  })

  test("other jobs' runs are not compared with this job's", () => {
    const other: RunRecord = { job: 'other', holder: 'b', claimedAt: T + 0.5 * I, outcome: 'ran' }
    const r = checkJob(job, [...runsAt([0, 1, 2]), other], noKills, window(0, 2))
    assert.equal(r.duplicates, 0)
    assert.equal(r.claims, 3)
  })
})

describe('misses are counted from the spacing of successful runs', () => {
  test('a gap of about one interval skips nothing; about two skips one; three skips two', () => {
    assert.equal(missedInGap(0.8 * I, I), 0)
    assert.equal(missedInGap(1.2 * I, I), 0)
    assert.equal(missedInGap(1.49 * I, I), 0)
    assert.equal(missedInGap(1.6 * I, I), 1)
    assert.equal(missedInGap(2 * I, I), 1)
    assert.equal(missedInGap(3 * I, I), 2)
  })

  test('a missing occurrence with no fault in its gap is an unexplained miss', () => {
    const report = checkHistory({ jobs: [job], runs: runsAt([0, 1, 2, 4, 5, 6]), kills: noKills, window: window(0, 6) })
    assert.equal(report.jobs[0]!.missed, 1)
    assert.equal(report.missedUnexplained, 1)
    assert.equal(report.ok, false)
  })

  test('a miss whose gap holds a tick that threw is classified as thrown', () => {
    const runs = [...runsAt([0, 1, 2, 4, 5, 6]), ...runsAt([3], 'threw', 'b')]
    const report = checkHistory({ jobs: [job], runs, kills: noKills, window: window(0, 6) })
    const r = report.jobs[0]!
    assert.deepEqual([r.missed, r.missedThrew, r.missedKilled, r.missedUnexplained], [1, 1, 0, 0])
    assert.equal(report.ok, true)
  })

  test('a miss whose gap holds an unfinished tick of a killed replica, or the kill itself, is classified as killed', () => {
    const kills = [{ holder: 'b#1', at: T + 3.05 * I }]
    const withRow = [...runsAt([0, 1, 2, 4, 5]), ...runsAt([3], null, 'b#1')]
    const r1 = checkJob(job, withRow, kills, window(0, 5))
    assert.deepEqual([r1.missed, r1.missedKilled, r1.missedUnexplained], [1, 1, 0])
    // killed between its claim and its first write: no row, only the kill
    const r2 = checkJob(job, runsAt([0, 1, 2, 4, 5]), kills, window(0, 5))
    assert.deepEqual([r2.missed, r2.missedKilled, r2.missedUnexplained], [1, 1, 0])
  })

  test('an unfinished tick of a replica that was never killed explains nothing', () => {
    const runs = [...runsAt([0, 1, 2, 4, 5]), ...runsAt([3], null, 'c#1')]
    const r = checkJob(job, runs, [{ holder: 'b#1', at: T + 0.5 * I }], window(0, 5))
    assert.deepEqual([r.missed, r.missedKilled, r.missedUnexplained], [1, 0, 1])
  })

  test('one fault explains one missed occurrence, not two', () => {
    const runs = [...runsAt([0, 1, 4, 5]), ...runsAt([2], 'threw', 'b')]
    const r = checkJob(job, runs, noKills, window(0, 5))
    assert.deepEqual([r.missed, r.missedThrew, r.missedUnexplained], [2, 1, 1])
  })

  test('gaps wholly outside the steady window are not counted', () => {
    const r = checkJob(job, runsAt([0, 3, 4, 5, 6, 9]), noKills, window(3, 6))
    assert.equal(r.missed, 0)
    assert.equal(r.maxGapIntervals, 1)
  })

  test('a gap that straddles the edge of the window is counted', () => {
    const r = checkJob(job, runsAt([0, 1, 2, 5, 6, 7]), noKills, window(3, 7))
    assert.equal(r.missed, 2)
  })
})

describe('a replica firing at another phase is neither a duplicate nor a miss', () => {
  // Replica A fires at +0.05 of each interval; replica B, whose clock is off by 0.85 of an
  // interval (plus whole hours), fires at +0.9 and takes over; later A wins again when B drifts.
  const offsets = [0.05, 1.05, 1.9, 2.9, 3.9, 5.05, 6.05, 7.05, 7.9, 8.9, 10.05, 11.05]
  const runs = offsets.map((o, i) => ({
    job: 'job',
    holder: [2, 3, 4, 8, 9].includes(i) ? 'b' : 'a',
    claimedAt: T + o * I,
    outcome: 'ran' as const,
  }))

  test('labelling runs floor(db_time / interval) would report a duplicate and a miss here', () => {
    const labels = runs.map((r) => Math.floor((r.claimedAt - T) / I))
    const repeated = labels.filter((l, i) => labels.indexOf(l) !== i).length
    const absent = Array.from({ length: 12 }, (_, k) => k).filter((k) => !labels.includes(k)).length
    assert.ok(repeated > 0 && absent > 0, `labels ${labels.join(',')}`)
  })

  test('counted by spacing and by runs per window, the history is clean', () => {
    const report = checkHistory({ jobs: [job], runs, kills: noKills, window: window(0.5, 11) })
    const r = report.jobs[0]!
    assert.equal(r.duplicates, 0)
    assert.equal(r.missed, 0)
    assert.equal(r.shortWindows, 0)
    assert.equal(report.ok, true)
    assert.deepEqual(r.byHolder, { a: 7, b: 5 })
  })
})

describe('runs per window catch a job that runs too rarely without a skipped gap', () => {
  test('a run every 1.4 intervals skips no gap, yet leaves windows short', () => {
    const offsets = Array.from({ length: 20 }, (_, k) => k * 1.4)
    const r = checkJob(job, runsAt(offsets), noKills, window(0, 25))
    assert.equal(r.missed, 0, 'no single gap reaches 1.5 intervals')
    assert.equal(r.windows, 5)
    assert.ok(r.shortWindows > 0)
  })

  test('a window short by one run because a tick threw in it is not counted short', () => {
    const runs = [...runsAt([0, 1, 3, 4, 5, 6, 7, 8, 9, 10]), ...runsAt([2], 'threw', 'b')]
    const r = checkJob(job, runs, noKills, window(0, 10))
    assert.equal(r.shortWindows, 0)
    assert.equal(r.missedThrew, 1)
  })

  test('a steady window shorter than five intervals is checked as one window', () => {
    const r = checkJob(job, runsAt([0, 1, 2, 3]), noKills, window(0, 3))
    assert.equal(r.windows, 1)
    assert.equal(r.shortWindows, 0)
  })
})

describe('the report', () => {
  test('sums the figures that must be zero over all jobs and prints one row per job', () => {
    const other: JobSpec = { name: 'other', intervalMs: 2 * I, leaseMs: 1600 }
    const runs = [
      ...runsAt([0, 1, 2, 3, 4]),
      ...[0, 0.5, 2.5, 4.5].map((o) => ({ job: 'other', holder: 'b', claimedAt: T + o * I, outcome: 'ran' as const })),
    ]
    const report = checkHistory({ jobs: [job, other], runs, kills: noKills, window: window(0, 4) })
    assert.equal(report.duplicates, 1)
    assert.equal(report.ok, false)
    const table = formatReport(report)
    assert.match(table, /^job\s+interval/)
    assert.match(table, /\njob\s+1000 ms\s+800 ms\s+5\s+5/)
    assert.match(table, /\nother\s+2000 ms\s+1600 ms\s+4\s+4/)
    assert.match(table, /other: a 0, b 4/)
  })
})
