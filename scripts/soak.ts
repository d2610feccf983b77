/**
 * The long soak: `npm run soak -- --seconds 300 --replicas 6 [--pg 14|18] [--pgbouncer]`.
 * Runs the replicas against the test database (embedded, or DATABASE_URL), checks the history and
 * prints one row per job. Exits 1 on a duplicate, an unexplained miss or a claim error.
 */
import { parseArgs } from 'node:util'
import { startPgBouncer } from '../test/helpers/pgbouncer.ts'
import { startTestServer } from '../test/helpers/postgres.ts'
import { formatReport } from '../test/soak/check.ts'
import { runSoak } from '../test/soak/run.ts'

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '60' },
    replicas: { type: 'string', default: '4' },
    pg: { type: 'string' },
    pgbouncer: { type: 'boolean', default: false },
  },
})
if (values.pg) process.env.PG_TEST_VERSION = values.pg
const seconds = Number(values.seconds)
const replicas = Number(values.replicas)
if (!Number.isFinite(seconds) || seconds < 15) throw new Error(`--seconds must be at least 15, got ${values.seconds}`)
if (!Number.isInteger(replicas) || replicas < 4)
  throw new Error(`--replicas must be at least 4, got ${values.replicas}`)

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
