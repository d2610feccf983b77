/**
 * The occurrence soak: replicas with pools of their own fire every slot of a 400 ms schedule, each
 * at a random moment up to three intervals late, with a 250 ms lease that ends mid-tick (ticks
 * work up to two leases, and leases are also ended at random), and one replica is killed and
 * started again. Beside the keyed job the same fleet runs a lease-only job on the same schedule,
 * which does run occurrences twice under all this: what the keyed job must never do.
 */
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import type pg from 'pg'
import { freshTable, testPool } from '../../../dev/postgres.ts'
import {
  asAnotherProcess,
  auditSlots,
  clockOffsetMs,
  Fleet,
  fleetRunsTable,
  sleep,
} from '../../helpers/occurrence-replicas.ts'

const INTERVAL_MS = 400
const LEASE_MS = 250
const LATE_MS = 3 * INTERVAL_MS
const WORK_MS = 2 * LEASE_MS
const SLOTS = 30
const REPLICAS = 5

let admin: pg.Pool
before(async () => {
  admin = await testPool()
})
after(() => admin.end())

/** Runs per occurrence of each job, from the runs table. */
async function runsBySlot(runs: string, job: string): Promise<Map<number, number>> {
  const { rows } = await admin.query(
    `SELECT (extract(epoch FROM occurrence) * 1000)::float8 AS slot, count(*)::int AS n FROM ${runs}
     WHERE job = $1 GROUP BY occurrence`,
    [job],
  )
  return new Map(rows.map((r) => [Math.round(Number(r.slot)), r.n]))
}

describe('occurrence keys under a soak: late timers, expiring leases, a kill and a restart', () => {
  test(`${REPLICAS} replicas, ${SLOTS} slots: no occurrence runs twice, and every slot fired for with nothing in the way runs once`, {
    timeout: 60_000,
  }, async (t) => {
    const table = await freshTable(admin, 'occsoak')
    const runs = await fleetRunsTable(admin)
    const offset = await clockOffsetMs(admin)
    const fleet = new Fleet(
      {
        table,
        runs,
        jobs: [
          { name: 'keyed', keyed: true },
          { name: 'lease-only', keyed: false },
        ],
        intervalMs: INTERVAL_MS,
        leaseMs: LEASE_MS,
        lateMs: LATE_MS,
        workMs: WORK_MS,
      },
      offset,
    )
    // On the database clock, like the slots.
    const until = (dbMs: number) => sleep(Math.max(0, dbMs + offset - Date.now()))
    // Leases are also ended at random moments, mid-tick or not, until the last fire.
    let chaos = true
    let expiring: Promise<void> = Promise.resolve()
    try {
      const first = fleet.currentSlot() + 3 * INTERVAL_MS
      const last = first + (SLOTS - 1) * INTERVAL_MS
      const replicas = await Promise.all(Array.from({ length: REPLICAS }, (_, i) => fleet.start(`r${i + 1}`, table)))
      for (const replica of replicas) fleet.schedule(replica, first, last)

      expiring = (async () => {
        while (chaos) {
          await sleep(200 + Math.random() * 600)
          if (chaos) await fleet.expire(admin, Math.random() < 0.5 ? 'keyed' : 'lease-only')
        }
      })()

      await until(first + 9 * INTERVAL_MS)
      const killed = replicas[1]!
      // Killed in the middle of a tick it won, where a kill does the most harm, if it wins one soon.
      const midTick = (await fleet.nextTick(killed, 4 * INTERVAL_MS)) !== null
      const inFlightAtKill = fleet.fires.filter((f) => f.replica === killed.name && f.settledAt === undefined).length
      await fleet.kill(killed, admin)
      await until(first + 15 * INTERVAL_MS)
      // Started again as a process is: it knows nothing yet of the table it claims on.
      const restarted = await fleet.start('r2-restarted', asAnotherProcess(table))
      fleet.schedule(restarted, fleet.currentSlot() + INTERVAL_MS, last)

      await until(last + LATE_MS)
      chaos = false
      await expiring
      await fleet.settle(15_000)
      const endAt = performance.now()

      const keyed = auditSlots(fleet, 'keyed', await runsBySlot(runs, 'keyed'), LEASE_MS, endAt)
      const leaseOnly = auditSlots(fleet, 'lease-only', await runsBySlot(runs, 'lease-only'), LEASE_MS, endAt)
      const byOutcome = (job: string) =>
        Object.fromEntries(
          ['won', 'lost', 'error'].map((o) => [o, fleet.fires.filter((f) => f.job === job && f.outcome === o).length]),
        )
      t.diagnostic(
        `keyed: ${JSON.stringify(byOutcome('keyed'))}, ${keyed.unobstructed} of ${keyed.slots} slots fired for unobstructed; ` +
          `lease-only: ${leaseOnly.duplicates.length} slots ran twice or more; ` +
          `killed ${midTick ? 'mid-tick' : 'between ticks'} with ${inFlightAtKill} calls in flight; ${fleet.locks.length} forced expiries; ` +
          `restarted replica won ${fleet.fires.filter((f) => f.replica === 'r2-restarted' && f.tickAt !== undefined).length}`,
      )

      assert.deepEqual(keyed.duplicates, [], 'no occurrence of the keyed job ran twice')
      assert.deepEqual(
        keyed.missed.map(({ slot, ticks, runs, fire }) => ({ slot, ticks, runs, replica: fire.replica })),
        [],
        'every slot some replica fired for with nothing in the way ran exactly once',
      )
      // The check above holds only as many slots as it found unobstructed; with most of them
      // excused it would pass for a fleet that runs nothing.
      assert.ok(keyed.unobstructed >= SLOTS / 3, `only ${keyed.unobstructed} of ${keyed.slots} slots were checked`)
      assert.ok(
        leaseOnly.duplicates.length > 0,
        'the lease-only job ran some occurrence twice: the fleet is harsh enough to show what keys prevent',
      )
      const errors = fleet.fires.filter((f) => f.outcome === 'error' && f.replica !== killed.name)
      assert.deepEqual(
        errors.map((f) => String(f.error)),
        [],
        'no claim of a live replica failed',
      )
    } finally {
      chaos = false
      await expiring.catch(() => {})
      await fleet.end()
    }
  })
})
