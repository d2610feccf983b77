/**
 * The race that scripts/runtimes.ts runs under Bun and under Deno, from a project where the packed
 * tarball and `pg` are installed as a user would install them. Plain JavaScript with no tooling
 * of ours, so each runtime loads it as it is.
 *
 * Ten claimants, each on a connection of its own, claim the same occurrence at once, in each of
 * ROUNDS rounds (a new job each round). Prints one line of JSON for the runner to judge: which
 * runtime ran it, the winners and runs of each round, and the holder the database kept.
 *
 *   DATABASE_URL=postgres://… RACE_TABLE=runtime_bun bun runtime-race.mjs
 */
import pg from 'pg'
import { createTableSql, quoteTable, withCronLease } from 'pg-cron-lease'

const CLAIMANTS = 10
const ROUNDS = 20

// Asked of the runtime itself, so a shim that quietly ran Node instead is caught by the runner.
const runtime =
  typeof globalThis.Bun !== 'undefined'
    ? `bun ${globalThis.Bun.version}`
    : typeof globalThis.Deno !== 'undefined'
      ? `deno ${globalThis.Deno.version.deno}`
      : `node ${process.versions.node}`

const url = process.env.DATABASE_URL
const table = process.env.RACE_TABLE
const admin = new pg.Client({ connectionString: url })
const clients = Array.from({ length: CLAIMANTS }, () => new pg.Client({ connectionString: url }))
try {
  // Every connection is open before the first round, so the claims leave together.
  await Promise.all([admin, ...clients].map((c) => c.connect()))
  await admin.query(createTableSql(table))
  const rounds = []
  for (let round = 1; round <= ROUNDS; round++) {
    const jobName = `race-${round}`
    // The same scheduled time for every claimant, as replicas of one cron schedule name it.
    const occurrence = new Date(Math.floor(Date.now() / 1000) * 1000)
    let runs = 0
    const outcomes = await Promise.all(
      clients.map((client, i) =>
        withCronLease(
          client,
          jobName,
          60_000,
          () => {
            runs++
          },
          { table, holder: `claimant-${i + 1}`, occurrence },
        ),
      ),
    )
    const winners = outcomes.flatMap((o, i) => (o.ran ? [`claimant-${i + 1}`] : []))
    const kept = await admin.query(`SELECT holder FROM ${quoteTable(table)} WHERE job_name = $1`, [jobName])
    rounds.push({ winners, runs, holder: kept.rows[0]?.holder ?? null })
  }
  console.log(JSON.stringify({ runtime, claimants: CLAIMANTS, rounds }))
} finally {
  await Promise.all([admin, ...clients].map((c) => c.end().catch(() => {})))
}
