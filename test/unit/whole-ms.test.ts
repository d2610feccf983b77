/**
 * One rule for every length in ms, option or argument: a finite number, rounded to the nearest
 * whole ms (a half up), then held to its range. A fraction is rounded, never refused; a number
 * that rounds out of range is refused, naming the option.
 */
import 'reflect-metadata'
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { listLeases, pauseJob, withCronLease } from '../../src/index.ts'
import { Leased } from '../../src/nestjs/index.ts'
import { isRecord, standIn } from '../helpers/stand-in.ts'

const tick = () => {}
const quiet = { warn() {}, debug() {} }

/** The claim's parameters, from a stand-in's calls. */
const claimOf = (calls: { text: string; params: unknown[] }[]) => calls.find((c) => !isRecord(c))!.params

describe('every length in ms is rounded to a whole ms, then checked', () => {
  test('leaseMs: 1.5 is a 2 ms lease', async () => {
    const db = standIn()
    await withCronLease(db, 'job', 1.5, tick)
    assert.equal(claimOf(db.calls)[1], 2)
  })

  test('clockToleranceMs: 1.5 is a 2 ms tolerance, 0.4 is none, and -0.6 is refused', async () => {
    const occurrence = new Date()
    for (const [given, sent] of [
      [1.5, 2],
      [0.4, 0],
    ] as const) {
      const db = standIn()
      await withCronLease(db, 'job', 1000, tick, { clockToleranceMs: given, occurrence, logger: quiet })
      assert.equal(claimOf(db.calls)[4], sent, `clockToleranceMs ${given}`)
    }
    await assert.rejects(
      withCronLease(standIn(), 'job', 1000, tick, { clockToleranceMs: -0.6 }),
      /opts\.clockToleranceMs must be at least 0 ms \(after rounding\), got -0\.6/,
    )
  })

  test('@Leased({ leaseMs: 1.5 }) is taken, as withCronLease takes it; 0.4 is refused', () => {
    assert.doesNotThrow(() => Leased({ leaseMs: 1.5 }))
    assert.throws(
      () => Leased({ leaseMs: 0.4 }),
      /@Leased\(\) options\.leaseMs must be at least 1 ms \(after rounding\), got 0\.4/,
    )
  })

  test('the same for keepAlive, overdueGraceMs, forMs and lockTimeoutMs', async () => {
    const db = standIn()
    await withCronLease(db, 'job', 1000, tick, { keepAlive: { beatMs: 1.5, extendMs: 999.5 } })
    const paused = standIn(() => ({ rows: [{ job_name: 'job', in_future: true }] }))
    await pauseJob(paused, 'job', { forMs: 1.5, lockTimeoutMs: 2.5 })
    assert.deepEqual(paused.calls[0]!.params, ['job', 2, null, 3])
    await listLeases(
      standIn(() => ({ rows: [{ job_name: null, checked_at: '2026-11-29T22:12:11.428993Z' }] })),
      { overdueGraceMs: 1.5 },
    )
  })
})
