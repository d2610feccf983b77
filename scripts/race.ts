/**
 * The claimant race, repeated: `npm run race -- --rounds 10000 [--claimants 10] [--pg 14|18] [--pgbouncer]`.
 * Each round expires the lease, then every claimant fires the same claim at once on its own
 * connection; exactly one must win. Runs on the test database (embedded, or DATABASE_URL), through
 * PgBouncer in transaction mode with --pgbouncer. Exits 1 on any round with more than one winner.
 */
import { parseArgs } from 'node:util'
import pg from 'pg'
import { startPgBouncer } from '../test/helpers/pgbouncer.ts'
import { freshTable, startTestServer } from '../test/helpers/postgres.ts'
import { race } from '../test/helpers/race.ts'

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '1000' },
    claimants: { type: 'string', default: '10' },
    pg: { type: 'string' },
    pgbouncer: { type: 'boolean', default: false },
  },
})
if (values.pg) process.env.PG_TEST_VERSION = values.pg
const rounds = Number(values.rounds)
const claimantCount = Number(values.claimants)
if (!Number.isInteger(rounds) || rounds < 1)
  throw new Error(`--rounds must be a positive integer, got ${values.rounds}`)
if (!Number.isInteger(claimantCount) || claimantCount < 2 || claimantCount > 100) {
  throw new Error(`--claimants must be an integer from 2 to 100, got ${values.claimants}`)
}

const server = await startTestServer()
const bouncer = values.pgbouncer ? await startPgBouncer(server.url) : undefined
const admin = new pg.Pool({ connectionString: server.url, max: 1 })
admin.on('error', () => {}) // an idle client dropped as the server stops, after the race is over
const clients: pg.Client[] = []
let code = 1
try {
  const via = bouncer ? ' through PgBouncer (transaction mode)' : ''
  console.log(`# race: ${claimantCount} claimants, ${rounds} rounds, Postgres ${server.major}${via}`)
  for (let i = 0; i < claimantCount; i++) {
    const client = new pg.Client({ connectionString: bouncer?.url ?? server.url })
    await client.connect()
    clients.push(client)
  }
  const table = await freshTable(admin, 'race')
  const started = performance.now()
  const step = Math.max(1, Math.ceil(rounds / 10))
  const report = await race({
    claimants: clients,
    table,
    jobName: 'race',
    rounds,
    onRound: (round, winners) => {
      if (winners > 1) console.log(`round ${round + 1}: ${winners} winners`)
      if ((round + 1) % step === 0) console.log(`# ${round + 1} rounds`)
    },
  })
  await admin.query(`DROP TABLE "${table}"`)
  const seconds = (performance.now() - started) / 1000
  console.log(`rounds              ${report.rounds}`)
  console.log(`single-winner       ${report.single}`)
  console.log(`zero-winner         ${report.none}`)
  console.log(`violations (>1 won) ${report.violations}`)
  console.log(`time                ${seconds.toFixed(1)} s (${(report.rounds / seconds).toFixed(0)} rounds/s)`)
  code = report.violations === 0 ? 0 : 1
} finally {
  await Promise.all(clients.map((c) => c.end()))
  await admin.end()
  await bouncer?.stop()
  await server.stop()
}
process.exit(code)
