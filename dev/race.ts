/**
 * The race used by the integration suite, the PgBouncer suite and `npm run race`: in each round,
 * every claimant fires the same claim at once on its own connection after the previous lease has
 * expired; exactly one must win.
 */

import type { Queryable } from '../src/index.ts'
import { withCronLease } from '../src/index.ts'
import { expireLease } from './postgres.ts'

export interface RaceReport {
  rounds: number
  /** How many rounds had exactly one, zero, and more than one winner. */
  single: number
  none: number
  violations: number
}

/**
 * Runs `rounds` rounds of `claimants.length` simultaneous claims for one job. Before each round the
 * lease is expired with an UPDATE, so every round starts with a claimable row (the first round
 * starts with none: the claimants race the INSERT).
 */
export async function race(options: {
  claimants: Queryable[]
  table: string
  jobName: string
  rounds: number
  leaseMs?: number
  onRound?: (round: number, winners: number) => void
}): Promise<RaceReport> {
  const { claimants, table, jobName, rounds, leaseMs = 60_000 } = options
  const [admin] = claimants
  if (!admin) throw new Error('race needs at least one claimant')
  const report: RaceReport = { rounds: 0, single: 0, none: 0, violations: 0 }
  for (let round = 0; round < rounds; round++) {
    if (round > 0) await expireLease(admin, table, jobName)
    const outcomes = await Promise.all(
      claimants.map((db, i) => withCronLease(db, jobName, leaseMs, () => i, { table, holder: `claimant-${i}` })),
    )
    const winners = outcomes.filter((o) => o.ran).length
    report.rounds++
    if (winners === 1) report.single++
    else if (winners === 0) report.none++
    else report.violations++
    options.onRound?.(round, winners)
  }
  return report
}
