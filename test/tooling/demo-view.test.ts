import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { type Occurrence, type Paint, summarise, timelineRow } from '../../dev/demo-view.ts'

const plain: Paint = { red: (t) => t, green: (t) => t, yellow: (t) => t, dim: (t) => t, bold: (t) => t }
const at = (slot: number, marks: Occurrence['marks']): Occurrence => ({ slot, marks })

describe("the demo's summary counts what happened to each occurrence", () => {
  test('duplicates are the runs beyond the first of an occurrence, misses the occurrences nobody ran', () => {
    const summary = summarise('advisory', [
      at(1, ['ran', 'ran', 'skipped']),
      at(2, ['ran', 'ran', 'ran']),
      at(3, ['skipped', 'skipped', 'skipped']),
      at(4, ['skipped', 'ran', 'skipped']),
    ])
    assert.deepEqual(summary, { mode: 'advisory', occurrences: 4, runs: 6, duplicates: 3, misses: 1, errors: 0 })
  })

  test('a replica that failed or never reported is counted as an error, not as a run', () => {
    const summary = summarise('lease', [at(1, ['error', undefined, 'ran'])])
    assert.deepEqual(summary, { mode: 'lease', occurrences: 1, runs: 1, duplicates: 0, misses: 0, errors: 2 })
  })
})

describe('the timeline row says what went wrong in words, so it reads without colour', () => {
  test('a duplicate, a miss and a clean occurrence', () => {
    assert.match(timelineRow(at(0, ['ran', 'ran']), plain), /^ {2}00:00:00 {4}● {2}● {2}DUPLICATE: ran 2 times$/)
    assert.match(timelineRow(at(1, ['skipped', 'skipped']), plain), /MISSED: no replica ran it$/)
    assert.equal(timelineRow(at(2, ['skipped', 'ran']), plain), '  00:00:02    ·  ●')
  })
})
