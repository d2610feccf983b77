import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { type LeaseInfo, listLeases } from '../../src/index.ts'
import { overdueGrace } from '../../src/listings.ts'
import { CURRENT_COLUMN_NAMES, listLeasesSql } from '../../src/sql.ts'
import { standIn } from '../helpers/stand-in.ts'

const ROW = {
  job_name: 'job',
  holder: 'h',
  claimed_at: '2026-11-29T22:12:11.428993Z',
  lease_until: '2026-11-29T22:13:01.428993Z',
  held: true,
  remaining_ms: 1500,
  checked_at: '2026-11-29T22:12:59.928993Z',
  last_outcome: null,
  last_ended_outcome: null,
  last_started_at: null,
  last_finished_at: null,
  last_duration_ms: null,
  last_error: null,
  last_success_at: null,
  every_ms: null,
  paused_until: null,
  paused: false,
  resumed_at: null,
  last_occurrence: null,
  next_due_at: null,
  since_due_ms: null,
  missed: 0,
  unfinished_runs: null,
}

// What an empty table answers: one row with the clock reading and no job.
const EMPTY = { rows: [{ job_name: null, checked_at: ROW.checked_at }] }

// The fields a row of the original table shape (no outcome recorded) maps to.
const NOTHING_RECORDED = {
  lastOutcome: null,
  lastEndedOutcome: null,
  lastStartedAt: null,
  lastFinishedAt: null,
  lastDurationMs: null,
  lastError: null,
  lastSuccessAt: null,
  everyMs: null,
  overdue: false,
  paused: false,
  pausedUntil: null,
  resumedAt: null,
  lastOccurrence: null,
  nextDueAt: null,
  missed: 0,
  unfinishedRuns: null,
}

describe('listLeases validates its arguments before the database is touched', () => {
  test('db without a query function names db and shows the value', async () => {
    for (const bad of [undefined, null, {}, { query: 1 }, 'postgres://x']) {
      await assert.rejects(
        listLeases(bad as never),
        (e: unknown) => e instanceof TypeError && /db must be/.test(e.message),
      )
    }
  })

  test('opts must be an object with known keys, and table a (schema.)identifier', async () => {
    for (const [opts, message] of [
      [[], /opts must be an object, got an array of length 0/],
      ['cron_leases', /opts must be an object, got "cron_leases"/],
      [{ tabel: 'x' }, /opts\.tabel must be one of the known options \(table, overdueFactor, overdueGraceMs\)/],
      [{ overdueGraceMs: 0 }, /opts\.overdueGraceMs must be at least 1 ms/],
      [{ overdueGraceMs: '1s' }, /opts\.overdueGraceMs must be a finite number/],
      [{ overdueFactor: 0.5 }, /opts\.overdueFactor must be a finite number, at least 1, got 0\.5/],
      [{ overdueFactor: '2' }, /opts\.overdueFactor must be/],
      [{ table: 'x; DROP TABLE y' }, /opts\.table must be an identifier.*got "x; DROP TABLE y"/],
      [{ table: 'a.b.c' }, /opts\.table must be/],
      [{ table: 5 }, /opts\.table must be.*got 5/],
    ] as const) {
      const db = standIn()
      await assert.rejects(
        listLeases(db, opts as never),
        (e: unknown) => e instanceof TypeError && message.test(e.message),
      )
      assert.equal(db.calls.length, 0, 'no query may be made for a bad argument')
    }
  })
})

describe('listLeases sends one read-only statement', () => {
  test('it selects from the quoted table, with no parameters, ordered by job name in byte order', async () => {
    const db = standIn(() => EMPTY)
    assert.deepEqual(await listLeases(db, { table: 'jobs.leases' }), [])
    assert.equal(db.calls.length, 1)
    const [call] = db.calls
    assert.deepEqual(call!.params, [])
    assert.match(call!.text, /^WITH "db clock" AS MATERIALIZED \(SELECT clock_timestamp\(\) AS at\)/)
    assert.match(call!.text, /FROM "db clock" LEFT JOIN LATERAL \([\s\S]*FROM "jobs"\."leases" AS lease\n/)
    assert.match(call!.text, /ORDER BY lease\.job_name COLLATE "C"$/)
    assert.doesNotMatch(call!.text, /now\(\)|\b(INSERT|UPDATE|DELETE|LOCK)\b/i)
    assert.equal(call!.text, listLeasesSql('jobs.leases', 'current', true))
    assert.equal(db.facts.length, 1, "after one read of the table's facts")
  })

  test('on a table of the original shape (or one not found) it names none of the optional columns', async () => {
    for (const shape of ['original', 'missing'] as const) {
      const db = standIn(() => EMPTY, shape)
      assert.deepEqual(await listLeases(db, { table: 'jobs.leases' }), [])
      assert.deepEqual(
        db.calls.map((c) => c.text),
        [listLeasesSql('jobs.leases', 'original')],
        shape,
      )
      for (const column of CURRENT_COLUMN_NAMES) assert.ok(!db.calls[0]!.text.includes(`lease.${column}`), column)
    }
  })
})

describe('listLeases reads rows strictly', () => {
  test('a row is mapped to camelCase fields, keeping timestamps as text', async () => {
    const db = standIn(() => ({ rows: [ROW, { ...ROW, job_name: 'k', holder: null, held: false, remaining_ms: '0' }] }))
    assert.deepEqual(await listLeases(db), [
      {
        jobName: 'job',
        holder: 'h',
        claimedAt: ROW.claimed_at,
        leaseUntil: ROW.lease_until,
        held: true,
        remainingMs: 1500,
        checkedAt: ROW.checked_at,
        ...NOTHING_RECORDED,
      },
      {
        jobName: 'k',
        holder: null,
        claimedAt: ROW.claimed_at,
        leaseUntil: ROW.lease_until,
        held: false,
        remainingMs: 0,
        checkedAt: ROW.checked_at,
        ...NOTHING_RECORDED,
      },
    ])
  })

  test("the outcome columns map to their fields, and overdue is judged on the database's elapsed time", async () => {
    const recorded = {
      ...ROW,
      last_outcome: 'error',
      last_ended_outcome: 'error',
      last_started_at: '2026-11-29T22:12:11.428993Z',
      last_finished_at: '2026-11-29T22:12:12.000000Z',
      last_duration_ms: 571.25,
      last_error: 'Error: boom',
      last_success_at: '2026-11-29T22:11:12.000000Z',
      every_ms: 20_000,
      // No due time stored: the statement judges it from the claim 48.5 s ago plus the 20 s interval.
      since_due_ms: 28_500,
    }
    const judged = async (overdueFactor: number): Promise<LeaseInfo> =>
      (
        await listLeases(
          standIn(() => ({ rows: [recorded] })),
          { overdueFactor },
        )
      )[0]!
    const [lenient, strict] = [judged(4), judged(2)]
    assert.deepEqual(await lenient, {
      jobName: 'job',
      holder: 'h',
      claimedAt: ROW.claimed_at,
      leaseUntil: ROW.lease_until,
      held: true,
      remainingMs: 1500,
      checkedAt: ROW.checked_at,
      lastOutcome: 'error',
      lastEndedOutcome: 'error',
      lastStartedAt: '2026-11-29T22:12:11.428993Z',
      lastFinishedAt: '2026-11-29T22:12:12.000000Z',
      lastDurationMs: 571.25,
      lastError: 'Error: boom',
      lastSuccessAt: '2026-11-29T22:11:12.000000Z',
      everyMs: 20_000,
      overdue: false,
      paused: false,
      pausedUntil: null,
      resumedAt: null,
      lastOccurrence: null,
      nextDueAt: null,
      missed: 0,
      unfinishedRuns: null,
    })
    assert.equal(
      (await strict).overdue,
      true,
      '48.5 s since the claim is 28.5 s past claim + 20 s, over the 20 s grace',
    )
    const [paused] = await listLeases(
      standIn(() => ({ rows: [{ ...recorded, paused: true, paused_until: 'infinity', remaining_ms: Infinity }] })),
    )
    assert.deepEqual(
      [paused!.overdue, paused!.paused, paused!.pausedUntil, paused!.remainingMs],
      [false, true, 'infinity', Infinity],
    )
  })

  test('with a next due time, overdue is that time passed unclaimed for longer than the grace', async () => {
    const due = {
      ...ROW,
      every_ms: 20_000,
      last_occurrence: '2026-11-29T22:12:00.000000Z',
      next_due_at: '2026-11-29T22:12:20.000000Z',
      missed: '3',
    }
    const judge = async (sinceDueMs: number | null, opts?: { overdueGraceMs?: number; overdueFactor?: number }) =>
      (
        await listLeases(
          standIn(() => ({ rows: [{ ...due, since_due_ms: sinceDueMs }] })),
          opts,
        )
      )[0]!
    const ahead = await judge(-5000)
    assert.deepEqual(
      [ahead.overdue, ahead.lastOccurrence, ahead.nextDueAt, ahead.missed],
      [false, due.last_occurrence, due.next_due_at, 3],
    )
    // The default grace is the interval, at most a minute: 20 s here.
    assert.equal((await judge(19_999)).overdue, false)
    assert.equal((await judge(20_001)).overdue, true)
    assert.equal((await judge(20_001, { overdueGraceMs: 30_000 })).overdue, false)
    assert.equal((await judge(30_001, { overdueGraceMs: 30_000 })).overdue, true)
    // The next due time decides over the interval rule: 48.5 s since the claim is not overdue while it is ahead.
    assert.equal((await judge(-1, { overdueFactor: 1 })).overdue, false)
    // An hourly job's default grace is a minute, not an hour.
    assert.equal(
      (await listLeases(standIn(() => ({ rows: [{ ...due, every_ms: 3_600_000, since_due_ms: 60_001 }] }))))[0]!
        .overdue,
      true,
    )
    const paused = (
      await listLeases(
        standIn(() => ({ rows: [{ ...due, since_due_ms: 999_999, paused: true, paused_until: 'infinity' }] })),
      )
    )[0]!
    assert.equal(paused.overdue, false, 'a paused job is never overdue')
  })

  test('without a stored due time, the due time is the last claim plus the interval, judged with the same grace', async () => {
    // Claimed 62 min ago, hourly: the statement puts it 2 min past its due time, more than the default grace of a minute.
    const hourly = { ...ROW, every_ms: 3_600_000, since_due_ms: 2 * 60_000 }
    const judge = async (row: object, opts?: { overdueGraceMs?: number; overdueFactor?: number }) =>
      (
        await listLeases(
          standIn(() => ({ rows: [row] })),
          opts,
        )
      )[0]!.overdue
    assert.equal(await judge(hourly), true, 'not two intervals: the grace is at most a minute')
    assert.equal(await judge({ ...hourly, since_due_ms: 59_999 }), false, 'within the minute')
    assert.equal(await judge(hourly, { overdueGraceMs: 3 * 60_000 }), false, 'overdueGraceMs applies here too')
    assert.equal(await judge(hourly, { overdueFactor: 3 }), false, 'factor 3: two units of a minute')
    assert.equal(await judge(hourly, { overdueFactor: 1 }), true)
    assert.equal(
      await judge({ ...hourly, every_ms: null, since_due_ms: null }),
      false,
      'with neither a due time nor an interval, never',
    )
  })

  test('a stored due time is the due time whenever it was stored, even before the last claim', async () => {
    // A due time stored before the claim, passed 2 min ago: the row's own, not ignored for its age.
    const stale = { ...ROW, every_ms: 20_000, next_due_at: '2026-11-29T22:10:59.928993Z', since_due_ms: 120_000 }
    const [lease] = await listLeases(standIn(() => ({ rows: [stale] })))
    assert.deepEqual([lease!.overdue, lease!.nextDueAt], [true, stale.next_due_at])
  })

  test('the grace is overdueGraceMs when given, else (overdueFactor − 1) × the interval at most a minute, a minute when unknown', () => {
    assert.equal(overdueGrace(20_000, undefined, 2), 20_000)
    assert.equal(overdueGrace(3_600_000, undefined, 2), 60_000)
    assert.equal(overdueGrace(null, undefined, 2), 60_000)
    assert.equal(overdueGrace(20_000, undefined, 3.5), 50_000)
    assert.equal(overdueGrace(20_000, undefined, 1), 0)
    assert.equal(overdueGrace(20_000, 5_000, 9), 5_000)
  })

  test('a result without a rows array is an error, not an empty list', async () => {
    for (const result of [undefined, null, {}, { rowCount: 0 }, { rows: 'x' }]) {
      await assert.rejects(listLeases(standIn(() => result)), /cannot list the leases in cron_leases: .*no rows array/)
    }
  })

  test('a row with a missing or mistyped column is an error naming the column', async () => {
    for (const [row, column] of [
      [{ ...ROW, held: 't' }, 'held'],
      [{ ...ROW, held: undefined }, 'held'],
      [{ ...ROW, remaining_ms: null }, 'remaining_ms'],
      [{ ...ROW, remaining_ms: -1 }, 'remaining_ms'],
      [{ ...ROW, remaining_ms: 1.5 }, 'remaining_ms'],
      [{ ...ROW, remaining_ms: '' }, 'remaining_ms'],
      [{ ...ROW, claimed_at: new Date() }, 'claimed_at'],
      [{ ...ROW, job_name: undefined }, 'job_name'],
      [{ ...ROW, holder: 7 }, 'holder'],
      [{ ...ROW, checked_at: null }, 'checked_at'],
      [{ ...ROW, last_outcome: 'maybe' }, 'last_outcome'],
      [{ ...ROW, paused: undefined }, 'paused'],
      [{ ...ROW, every_ms: 'x' }, 'every_ms'],
      [{ ...ROW, missed: null }, 'missed'],
      [{ ...ROW, since_due_ms: 'soon' }, 'since_due_ms'],
      [{ ...ROW, next_due_at: 5 }, 'next_due_at'],
    ] as const) {
      await assert.rejects(
        listLeases(standIn(() => ({ rows: [row] }))),
        (e: unknown) => e instanceof TypeError && e.message.includes(`column ${column} has an unexpected value`),
      )
    }
  })
})
