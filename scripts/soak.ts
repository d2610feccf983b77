/**
 * The long soak: `npm run soak -- --seconds 300 --replicas 6 [--pg 14|18] [--pgbouncer]`.
 * Runs the replicas against the test database (embedded, or DATABASE_URL), checks the history and
 * prints one row per job. Exits 1 on a duplicate, an unexplained miss or a claim error, 2 on a usage error.
 */
import { parseArgs } from 'node:util'
import { startPgBouncer } from '../dev/pgbouncer.ts'
import { startTestServer } from '../dev/postgres.ts'
import { formatReport } from '../dev/soak/check.ts'
import { runSoak } from '../dev/soak/run.ts'

// The floors: four replicas leave three to compete while one is killed, and 15 s leave a steady
// window of several intervals of the slowest job after start-up and before shutdown.
function usage(message: string): never {
  console.error(
    `soak: ${message}; usage: npm run soak -- --seconds N (>= 15) --replicas R (>= 4) [--pg 14|18] [--pgbouncer]`,
  )
  process.exit(2)
}

let values: { seconds: string; replicas: string; pg?: string; pgbouncer: boolean }
try {
  ;({ values } = parseArgs({
    options: {
      seconds: { type: 'string', default: '60' },
      replicas: { type: 'string', default: '4' },
      pg: { type: 'string' },
      pgbouncer: { type: 'boolean', default: false },
    },
  }))
} catch (error) {
  usage((error as Error).message)
}
if (values.pg) process.env.PG_TEST_VERSION = values.pg
const seconds = Number(values.seconds)
const replicas = Number(values.replicas)
if (!Number.isFinite(seconds) || seconds < 15) usage(`--seconds must be at least 15, got ${values.seconds}`)
if (!Number.isInteger(replicas) || replicas < 4)
  usage(`--replicas must be an integer of at least 4, got ${values.replicas}`)

const server = await startTestServer()
const bouncer = values.pgbouncer ? await startPgBouncer(server.url) : undefined
let code = 1
try {
  const url = bouncer?.url ?? server.url
  console.log(
    `# soak: ${replicas} replicas for ${seconds} s on Postgres ${server.major}${bouncer ? ' through PgBouncer (transaction mode)' : ''}`,
  )
  const result = await runSoak({
    url,
    adminUrl: server.url,
    seconds,
    replicas,
    log: (line) => console.log(`# ${line}`),
  })
  const { report } = result
  console.log(formatReport(report))
  const fires = result.replicas.reduce((n, r) => n + r.fires, 0)
  const won = result.replicas.reduce((n, r) => n + r.won + r.threw, 0)
  console.log(
    `\nkilled replica: ${result.kills[0]?.holder}, ${result.killedMidTick ? 'inside a tick it had won' : 'between ticks'}`,
  )
  console.log(
    `steady window ${(result.windowMs / 1000).toFixed(1)} s; fires ${fires}, won ${won} (replicas that were stopped cleanly)`,
  )
  console.log(
    `duplicates ${report.duplicates}, unexplained misses ${report.missedUnexplained}, short windows ${report.shortWindows}, errors ${result.errors.length}`,
  )
  for (const line of result.errors.slice(0, 10)) console.log(`error: ${line}`)
  code = report.ok && result.errors.length === 0 ? 0 : 1
  console.log(code === 0 ? 'OK' : 'FAILED')
} finally {
  await bouncer?.stop()
  await server.stop()
}
process.exit(code)
