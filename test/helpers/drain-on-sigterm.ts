/**
 * A process that drains on SIGTERM, as the README shows: one tick holding a pool client in a
 * transaction (the fence pattern) lets go when its signal aborts, so `pool.end()` resolves and the
 * process exits by itself. Run it with `node --import tsx test/helpers/drain-on-sigterm.ts TABLE`
 * (DATABASE_URL set). Prints `started` once the tick runs, `aborted: <reason>` when its call
 * rejects, and for each SIGTERM `draining` at once and the drain's result as JSON; it exits after two.
 */
import pg from 'pg'
import { drainLeases, withCronLease } from '../../src/index.ts'

const table = process.argv[2]
if (!table) throw new Error('drain-on-sigterm needs the lease table as its argument')
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 3 })

// Alive until the second SIGTERM is handled, so the test can send it whenever it likes.
let signals = 0
const waitForSecond = setTimeout(() => {}, 20_000)
process.on('SIGTERM', async () => {
  const nth = ++signals
  console.log(`draining (SIGTERM ${nth})`)
  const result = await drainLeases({ timeoutMs: 300 })
  console.log(JSON.stringify(result))
  if (nth === 1) await pool.end()
  else clearTimeout(waitForSecond)
})

const run = withCronLease(
  pool,
  'sigterm',
  60_000,
  async (ctx) => {
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      await ctx.fence(client)
      console.log('started')
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve))
      await client.query('ROLLBACK')
    } finally {
      client.release()
    }
  },
  { table },
)
run.catch((error: Error) => console.log(`aborted: ${error.message}`))
