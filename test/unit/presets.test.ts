import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { LEASE, leaseForInterval, MAX_LEASE_MS } from '../../src/index.ts'

describe('lease lengths', () => {
  test('the presets are frozen and in milliseconds', () => {
    assert.deepEqual(
      { ...LEASE },
      { EVERY_MINUTE: 50_000, EVERY_5_MIN: 240_000, EVERY_10_MIN: 480_000, HOURLY: 3_000_000, DAILY: 72_000_000 },
    )
    assert.ok(Object.isFrozen(LEASE))
    assert.throws(() => {
      ;(LEASE as { HOURLY: number }).HOURLY = 1
    }, TypeError)
  })

  test('leaseForInterval is 80% of the interval in whole milliseconds', () => {
    assert.equal(leaseForInterval(1000), 800)
    assert.equal(leaseForInterval(15_000), 12_000)
    assert.equal(leaseForInterval(60 * 60 * 1000), 2_880_000)
    assert.equal(leaseForInterval(1), 1)
    assert.equal(leaseForInterval(0.5), 1, 'never below 1 ms')
  })

  test('leaseForInterval rejects non-positive, non-finite and too-long intervals, showing the value', () => {
    for (const bad of [0, -1, Number.NaN, Infinity, '1000', null, undefined]) {
      assert.throws(
        () => leaseForInterval(bad as number),
        (e: unknown) => e instanceof TypeError && /intervalMs/.test(e.message),
      )
    }
    assert.throws(() => leaseForInterval(MAX_LEASE_MS * 2), /must be short enough that its lease/)
    assert.throws(() => leaseForInterval(-5), /got -5$/)
  })
})
