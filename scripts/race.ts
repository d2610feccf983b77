/**
 * The claimant race, repeated:
 *
 *   npm run race -- --rounds 10000 [--claimants 10] [--pg 14|18] [--direct | --pgbouncer]
 *
 * Each round expires the lease, then every claimant fires the same claim at once on its own
 * connection; exactly one must win. It runs on the test database (embedded, or DATABASE_URL), and
 * then again through PgBouncer in transaction mode when pgbouncer is installed (`--direct` skips
 * that; `--pgbouncer` runs only that, and fails if it is missing). Exits 1 on any round with more
 * than one winner, 2 on a usage error.
 */
import { parseArgs } from 'node:util'
import pg from 'pg'
import { findPgBouncer, pgbouncerMissing, startPgBouncer } from '../dev/pgbouncer.ts'
import { freshTable, type Server, startTestServer } from '../dev/postgres.ts'
import { type RaceReport, race } from '../dev/race.ts'

function usage(message: string): never {
  console.error(
    `race: ${message}; usage: npm run race -- --rounds N [--claimants N] [--pg 14|18] [--direct | --pgbouncer]`,
  )
  process.exit(2)
}

let values: { rounds: string; claimants: string; pg?: string; direct: boolean; pgbouncer: boolean }
try {
  ;({ values } = parseArgs({
    options: {
      rounds: { type: 'string', default: '1000' },
      claimants: { type: 'string', default: '10' },
      pg: { type: 'string' },
      direct: { type: 'boolean', default: false },
      pgbouncer: { type: 'boolean', default: false },
    },
  }))
} catch (error) {
  usage((error as Error).message)
}
if (values.pg) process.env.PG_TEST_VERSION = values.pg
const rounds = Number(values.rounds)
const claimantCount = Number(values.claimants)
if (!Number.isInteger(rounds) || rounds < 1) usage(`--rounds must be a positive integer, got ${values.rounds}`)
if (!Number.isInteger(claimantCount) || claimantCount < 2 || claimantCount > 100) {
  usage(`--claimants must be an integer from 2 to 100, got ${values.claimants}`)
}
if (values.direct && values.pgbouncer) usage('--direct and --pgbouncer exclude each other')
if (values.pgbouncer && pgbouncerMissing()) usage(pgbouncerMissing() as string)

const routes: ('direct' | 'pgbouncer')[] = values.pgbouncer
  ? ['pgbouncer']
  : values.direct || findPgBouncer() === null
    ? ['direct']
    : ['direct', 'pgbouncer']
if (routes.length === 1 && routes[0] === 'direct' && !values.direct) console.log(`# ${pgbouncerMissing()}: direct only`)

/** One race of `rounds` rounds on `url`, with its own table and connections. */
async function raceOn(server: Server, url: string, label: string): Promise<RaceReport & { winners: number }> {
  const admin = new pg.Pool({ connectionString: server.url, max: 1 })
  admin.on('error', () => {}) // an idle client dropped as the server stops, after the race is over
  const clients: pg.Client[] = []
  try {
    console.log(`# race ${label}: ${claimantCount} claimants, ${rounds} rounds, Postgres ${server.major}`)
    for (let i = 0; i < claimantCount; i++) {
      const client = new pg.Client({ connectionString: url })
      await client.connect()
      clients.push(client)
    }
    const table = await freshTable(admin, 'race')
    const started = performance.now()
    const step = Math.max(1, Math.ceil(rounds / 10))
    let winners = 0
    const report = await race({
      claimants: clients,
      table,
      jobName: 'race',
      rounds,
      onRound: (round, won) => {
        winners += won
        if (won > 1) console.log(`round ${round + 1}: ${won} winners`)
        if ((round + 1) % step === 0) console.log(`# ${round + 1} rounds`)
      },
    })
    await admin.query(`DROP TABLE "${table}"`)
    const seconds = (performance.now() - started) / 1000
    console.log(`# ${label}: ${seconds.toFixed(1)} s (${(report.rounds / seconds).toFixed(0)} rounds/s)`)
    return { ...report, winners }
  } finally {
    await Promise.all(clients.map((c) => c.end()))
    await admin.end()
  }
}

const server = await startTestServer()
const results: [string, RaceReport & { winners: number }][] = []
let code = 1
try {
  for (const route of routes) {
    if (route === 'direct') results.push(['direct', await raceOn(server, server.url, 'direct')])
    else {
      const bouncer = await startPgBouncer(server.url)
      try {
        results.push(['pgbouncer', await raceOn(server, bouncer.url, 'through PgBouncer (transaction mode)')])
      } finally {
        await bouncer.stop()
      }
    }
  }
  const row = (cells: (string | number)[]) => console.log(cells.map((c, i) => String(c).padStart(i ? 12 : 10)).join(''))
  row(['route', 'rounds', 'winners', 'one winner', 'no winner', 'violations'])
  for (const [route, r] of results) row([route, r.rounds, r.winners, r.single, r.none, r.violations])
  const violations = results.reduce((sum, [, r]) => sum + r.violations, 0)
  console.log(`violations: ${violations}`)
  code = violations === 0 ? 0 : 1
} finally {
  await server.stop()
}
process.exit(code)
