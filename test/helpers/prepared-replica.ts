/**
 * One replica as its own process, for the prepared-statement tests through PgBouncer: a `pg` Pool
 * of several clients that, round after round, claims the round's job from every client at once
 * with the default options (prepared statements). The round's winner renews twice, records its
 * run, and on every third round also waits for a keep-alive beat.
 *
 *   node --import tsx test/helpers/prepared-replica.ts
 *
 * Environment: DATABASE_URL, LEASE_TABLE, RUNS_TABLE, HOLDER, ROUNDS, CLIENTS.
 * Prints `{"ready":true}` once its pool is open, starts the rounds when a line arrives on stdin,
 * and prints one JSON line of counters at the end (see ReplicaReport).
 */
import diagnostics from 'node:diagnostics_channel'
import { createInterface } from 'node:readline'
import pg from 'pg'
import { handleState } from '../../src/handle.ts'
import { CHANNELS, type RenewMessage, withCronLease } from '../../src/index.ts'
import { recordRun } from './occurrences.ts'

/** What the replica prints when it is done. */
export interface ReplicaReport {
  holder: string
  claims: number
  won: number
  renewed: number
  beats: number
  /** Every claim, renew or tick error, as `round: message`; the tests expect none. */
  errors: string[]
  /** Whether the pool fell back to plain statements. */
  unprepared: boolean
}

const env = (name: string) => {
  const value = process.env[name]
  if (!value) throw new Error(`prepared-replica needs ${name}`)
  return value
}

const table = env('LEASE_TABLE')
const runsTable = env('RUNS_TABLE')
const holder = env('HOLDER')
const rounds = Number(env('ROUNDS'))
const clients = Number(env('CLIENTS'))
const LEASE_MS = 60_000
// The beat's extension differs from both renews, so its messages are told apart by `ms`.
const BEAT = { beatMs: 5, extendMs: 20_000 }
const RENEWS_MS = [LEASE_MS, 40_000]

const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: clients })
const report: ReplicaReport = { holder, claims: 0, won: 0, renewed: 0, beats: 0, errors: [], unprepared: false }

// A beat publishes a renew message with the beat's extension; the tick waits for one.
const beatWaiters = new Map<string, () => void>()
diagnostics.subscribe(CHANNELS.renew, (message) => {
  const { jobName, renewed, ms } = message as RenewMessage
  if (renewed && ms === BEAT.extendMs) {
    report.beats++
    beatWaiters.get(jobName)?.()
  }
})

function nextBeat(jobName: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no keep-alive beat within 5 s')), 5000)
    beatWaiters.set(jobName, () => {
      clearTimeout(timer)
      beatWaiters.delete(jobName)
      resolve()
    })
  })
}

async function claimRound(round: number, client: number): Promise<void> {
  const jobName = `round-${round}`
  const withBeat = round % 3 === 0
  report.claims++
  try {
    await withCronLease(
      pool,
      jobName,
      LEASE_MS,
      async (ctx) => {
        report.won++
        if (withBeat) await nextBeat(jobName)
        for (const ms of RENEWS_MS) {
          if (await ctx.renew(ms)) report.renewed++
          else report.errors.push(`${round}: the winner's renew(${ms}) resolved false`)
        }
        await recordRun(pool, runsTable, `${holder}/${client}:${round}`)
      },
      { table, holder: `${holder}/${client}`, ...(withBeat ? { keepAlive: BEAT } : {}) },
    )
  } catch (error) {
    report.errors.push(`${round}: ${(error as { code?: string }).code ?? ''} ${(error as Error).message}`)
  }
}

// Every client is opened before the start line, so each one's first statement comes in the rounds.
const opened = await Promise.all(Array.from({ length: clients }, () => pool.connect()))
for (const client of opened) client.release()
console.log(JSON.stringify({ ready: true }))
const lines = createInterface({ input: process.stdin })
await new Promise<void>((resolve) => lines.once('line', () => resolve()))
lines.close()

for (let round = 0; round < rounds; round++) {
  await Promise.all(Array.from({ length: clients }, (_, client) => claimRound(round, client)))
}
report.unprepared = handleState(pool).unprepared
await pool.end()
console.log(JSON.stringify(report))
