/**
 * A /metrics endpoint for Prometheus, in a service that already runs its jobs with pg-cron-lease:
 * each scrape reads the lease table once with listLeases and writes a few gauges in the Prometheus
 * text format. (`pg-cron-lease status --format prometheus` prints every gauge, for node_exporter's
 * textfile collector; this is the same idea served over HTTP.)
 *
 *   DATABASE_URL=postgres://... PORT=9464 npx tsx examples/prometheus-endpoint.ts
 *   curl http://127.0.0.1:9464/metrics
 *
 * It stops by itself after EXAMPLE_DURATION_MS (default 30000), or on Ctrl-C or SIGTERM.
 */
import http from 'node:http'
import pg from 'pg'
import {
  CRON_LEASES_TABLE_SQL,
  type LeaseInfo,
  leaseForInterval,
  listLeases,
  withCronLease,
} from 'pg-cron-lease'

const durationMs = Number(process.env.EXAMPLE_DURATION_MS ?? 30_000)
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL })
await pool.query(CRON_LEASES_TABLE_SQL)
// One run of one job, so there is something to show.
await withCronLease(pool, 'example:prometheus-endpoint', leaseForInterval(60_000), () => {})

// Label values escape backslash, double quote and line feed; job names may hold any of them.
const label = (text: string) => text.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`))

function gauge(
  name: string,
  help: string,
  leases: LeaseInfo[],
  value: (l: LeaseInfo) => number | null,
): string[] {
  const samples = leases.flatMap((l) => {
    const v = value(l)
    // An unknown value (no success yet) is left out, not written as a made-up 0.
    return v === null ? [] : [`${name}{job_name="${label(l.jobName)}"} ${v}`]
  })
  return [`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, ...samples]
}

// An age is checkedAt minus another database timestamp: the clock of this machine plays no part.
const ageSeconds = (l: LeaseInfo, at: string | null) =>
  at === null ? null : (Date.parse(l.checkedAt) - Date.parse(at)) / 1000

async function metrics(): Promise<string> {
  const leases = await listLeases(pool)
  return [
    ...gauge('pg_cron_lease_overdue', 'Whether the job is overdue (1) or not (0).', leases, (l) =>
      Number(l.overdue),
    ),
    ...gauge(
      'pg_cron_lease_last_outcome_ok',
      'Whether the last run ended ok (1) or failed (0).',
      leases,
      (l) => (l.lastOutcome === null ? null : Number(l.lastOutcome === 'ok')),
    ),
    ...gauge(
      'pg_cron_lease_last_success_age_seconds',
      'Seconds since the last run that ended ok.',
      leases,
      (l) => ageSeconds(l, l.lastSuccessAt),
    ),
    '# EOF',
    '',
  ].join('\n')
}

const server = http.createServer((request, response) => {
  if (request.url !== '/metrics') {
    response.writeHead(404).end()
    return
  }
  metrics().then(
    (body) =>
      response
        .writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' })
        .end(body),
    // A failed scrape shows up as up == 0 in Prometheus, which is what an alert should see.
    (error) =>
      response
        .writeHead(503, { 'content-type': 'text/plain' })
        .end(`cannot read the leases: ${error.message}\n`),
  )
})

server.listen(Number(process.env.PORT ?? 9464), '127.0.0.1', () => {
  const { port } = server.address() as { port: number }
  console.log(`serving http://127.0.0.1:${port}/metrics`)
})

let stopping: Promise<void> | undefined
// Once, whichever asks first: the timer or a signal.
function stop(): Promise<void> {
  stopping ??= (async () => {
    clearTimeout(deadline)
    console.log('stopping')
    // close() takes no new connection and calls back once the open ones have ended: a scrape
    // already received still reads the leases through the pool, so the pool ends after it.
    await new Promise((resolve) => server.close(resolve))
    await pool.end()
    console.log('stopped')
  })()
  return stopping
}
const deadline = setTimeout(stop, durationMs)
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, stop)
