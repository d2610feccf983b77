/**
 * Guarding the tick's own writes with its claim. The fence of renew() and keep-alive does not
 * cover what the tick writes itself: a tick that lost its lease (it ran past it, and another
 * replica claimed the job) keeps running until it looks at ctx.signal. ctx.fence(client) fences a
 * write to the same database instead: in the write's transaction, it checks that no other claim
 * has replaced this one and keeps any new claim of the job from winning until the transaction
 * ends, so the write commits only as this claim's, and never after a successor started. When
 * another claim has replaced this one it rejects with a LeaseLostError, and the write is rolled
 * back.
 *
 *   DATABASE_URL=postgres://... npx tsx examples/fenced-write.ts
 *
 * It plays both sides in one process: a write under the lease, a rival claim that loses while a
 * fenced write is open (the lease has run out, but no other claim took it, so it is still this
 * claim's to fence), the same rival winning once it is committed, and a write after that
 * takeover, which is rolled back.
 */
import pg from 'pg'
import {
  CRON_LEASES_TABLE_SQL,
  LEASE,
  type LeaseContext,
  LeaseLostError,
  releaseLease,
  withCronLease,
} from 'pg-cron-lease'

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)
await pool.query('CREATE TABLE IF NOT EXISTS example_reports (name text PRIMARY KEY)')
await pool.query('TRUNCATE example_reports')
const JOB = 'example:fenced-write'
await releaseLease(pool, JOB) // a fresh start when run again

/**
 * Runs `write` in a transaction that commits only as `ctx`'s claim. Resolves false, having written
 * nothing, when another claim has taken the lease over.
 */
async function fencedWrite(
  ctx: LeaseContext,
  write: (client: pg.PoolClient) => Promise<void>,
): Promise<boolean> {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    await ctx.fence(client) // until COMMIT, a new claim of this job loses
    await write(client)
    await client.query('COMMIT')
    return true
  } catch (error) {
    await client.query('ROLLBACK')
    if (error instanceof LeaseLostError) return false // another claim runs the job now
    throw error
  } finally {
    client.release()
  }
}

const report = (name: string) => async (client: pg.PoolClient) => {
  await client.query('INSERT INTO example_reports (name) VALUES ($1)', [name])
}

await withCronLease(pool, JOB, LEASE.HOURLY, async (ctx) => {
  console.log(
    `first write: ${(await fencedWrite(ctx, report('first'))) ? 'committed' : 'rolled back'}`,
  )

  // Stand-in for a tick that ran past its lease: the lease ends now, and a rival replica claims
  // the job while this tick's second write is open.
  await releaseLease(pool, JOB)
  const rivalClaims = async () =>
    (await withCronLease(pool, JOB, LEASE.HOURLY, () => {}, { holder: 'rival' })).ran
      ? 'won'
      : 'lost'
  const second = await fencedWrite(ctx, async (client) => {
    console.log(`rival claim while the second write is open: ${await rivalClaims()}`)
    await report('second')(client)
  })
  console.log(`second write: ${second ? 'committed' : 'rolled back'}`)
  console.log(`rival claim after the commit: ${await rivalClaims()}`)

  const third = await fencedWrite(ctx, report('third'))
  console.log(`third write: ${third ? 'committed' : 'rolled back: the lease was taken over'}`)
})

const { rows } = await pool.query('SELECT name FROM example_reports ORDER BY name')
console.log(`reports written: ${rows.map((r) => r.name).join(', ')}`)
await pool.query('DROP TABLE example_reports')
await pool.end()
