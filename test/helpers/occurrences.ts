/**
 * Counting scheduler occurrences by the database clock. Every tick that runs inserts one row
 * stamped with `clock_timestamp()`; the replicas' own clocks (which a test may skew) are never
 * read. Runs of one occurrence land within milliseconds of each other, and consecutive
 * occurrences one interval apart, so the spacing alone tells a duplicate (a gap far under the
 * interval) from a missed occurrence (a gap of about two intervals).
 */

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import type pg from 'pg'
import type { Queryable } from '../../src/index.ts'

/** A fresh table of runs: (holder, at). */
export async function runsTable(db: pg.Pool): Promise<string> {
  const table = `runs_${randomBytes(5).toString('hex')}`
  await db.query(`CREATE TABLE "${table}" (holder text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
  return table
}

/** Records one run of the tick, stamped by the database. */
export async function recordRun(db: Queryable, table: string, holder: string): Promise<void> {
  await db.query(`INSERT INTO "${table}" (holder) VALUES ($1)`, [holder])
}

/** The database's clock now, as epoch milliseconds. */
export async function databaseMs(db: pg.Pool): Promise<number> {
  const { rows } = await db.query(`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms`)
  return Number(rows[0].ms)
}

export interface OccurrenceReport {
  /** Rows recorded: ticks that ran. */
  runs: number
  /** Occurrences spanned from the first run to the last, by the database clock. */
  occurrences: number
  /** Gaps between consecutive runs, in ms by the database clock. */
  gapsMs: number[]
  /** Runs per holder. */
  byHolder: Record<string, number>
  /** Epoch ms (database clock) of every run. */
  atMs: number[]
}

export async function readRuns(db: pg.Pool, table: string, intervalMs: number): Promise<OccurrenceReport> {
  const { rows } = await db.query(
    `SELECT holder, (extract(epoch FROM at) * 1000)::float8 AS ms FROM "${table}" ORDER BY at`,
  )
  const atMs = rows.map((r) => Number(r.ms))
  const gapsMs = atMs.slice(1).map((ms, i) => Math.round(ms - atMs[i]!))
  const byHolder: Record<string, number> = {}
  for (const r of rows) byHolder[r.holder] = (byHolder[r.holder] ?? 0) + 1
  const span = atMs.length > 0 ? atMs.at(-1)! - atMs[0]! : 0
  return {
    runs: rows.length,
    occurrences: atMs.length > 0 ? Math.round(span / intervalMs) + 1 : 0,
    gapsMs,
    byHolder,
    atMs,
  }
}

/**
 * Every occurrence ran exactly once: no two runs within half an interval of each other (a
 * duplicate), no gap of 1.5 intervals or more (a missed occurrence), so runs equal occurrences.
 */
export function assertExactlyOnce(report: OccurrenceReport, intervalMs: number, minOccurrences: number): void {
  const detail = JSON.stringify({ runs: report.runs, gapsMs: report.gapsMs, byHolder: report.byHolder })
  assert.ok(report.runs >= minOccurrences, `expected at least ${minOccurrences} runs: ${detail}`)
  const duplicates = report.gapsMs.filter((gap) => gap < intervalMs / 2)
  assert.deepEqual(duplicates, [], `a duplicate run (two runs less than half an interval apart): ${detail}`)
  const missed = report.gapsMs.filter((gap) => gap >= intervalMs * 1.5)
  assert.deepEqual(missed, [], `a missed occurrence (a gap of 1.5 intervals or more): ${detail}`)
  assert.equal(report.runs, report.occurrences, detail)
}
