/**
 * PgBouncer in transaction pooling mode in front of a Postgres server, for the tests that prove
 * the library works through it (no named prepared statements, no session state).
 *
 * It uses the Debian package's binary (`apt-get install pgbouncer`, or `PGBOUNCER=/path`). PgBouncer
 * refuses to run as root, so as root it is started as the `postgres` user with `runuser`.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { accessSync, chmodSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { freePort } from './postgres.ts'

export interface PgBouncer {
  /** Connect here: transaction pooling onto the server given to startPgBouncer. */
  url: string
  port: number
  stop(): Promise<void>
}

const SEARCH = [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/local/sbin', '/usr/bin']

/**
 * The pgbouncer binary, or null when it is not installed.
 *
 * @example
 * findPgBouncer() // '/usr/sbin/pgbouncer'
 */
export function findPgBouncer(): string | null {
  const candidates = process.env.PGBOUNCER ? [process.env.PGBOUNCER] : SEARCH.map((dir) => path.join(dir, 'pgbouncer'))
  for (const file of candidates) {
    try {
      accessSync(file, constants.X_OK)
      return file
    } catch {}
  }
  return null
}

/**
 * The installed PgBouncer's version as [major, minor], or null when it is not installed.
 * Before 1.21 it cannot carry protocol-level prepared statements in transaction mode.
 *
 * @example
 * pgbouncerVersion() // [1, 18]
 */
export function pgbouncerVersion(): [number, number] | null {
  const binary = findPgBouncer()
  if (!binary) return null
  const match = /PgBouncer (\d+)\.(\d+)/.exec(execFileSync(binary, ['--version'], { encoding: 'utf8' }))
  if (!match) throw new Error(`cannot read the version of ${binary}`)
  return [Number(match[1]), Number(match[2])]
}

/**
 * Why the PgBouncer tests cannot run here, or null when they can.
 *
 * @example
 * describe('through PgBouncer', { skip: pgbouncerMissing() ?? false }, () => {})
 */
export function pgbouncerMissing(): string | null {
  if (findPgBouncer() !== null) return null
  return 'pgbouncer is not installed (Debian: apt-get install -y pgbouncer; or set PGBOUNCER=/path/to/pgbouncer)'
}

/**
 * Starts PgBouncer on a free port in transaction mode in front of `serverUrl`, and waits until a
 * query goes through it. `stop()` ends it and removes its config.
 *
 * @example
 * const bouncer = await startPgBouncer(process.env.DATABASE_URL)
 * const pool = new pg.Pool({ connectionString: bouncer.url })
 * // ...
 * await pool.end()
 * await bouncer.stop()
 */
export async function startPgBouncer(serverUrl: string, poolSize = 40): Promise<PgBouncer> {
  const binary = findPgBouncer()
  if (!binary) throw new Error(pgbouncerMissing()!)
  const server = new URL(serverUrl)
  const database = decodeURIComponent(server.pathname.slice(1)) || 'postgres'
  const user = decodeURIComponent(server.username) || 'postgres'
  const password = decodeURIComponent(server.password)
  const port = await freePort()
  const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-bouncer-'))
  const config = path.join(dir, 'pgbouncer.ini')
  const quote = (v: string) => `'${v.replaceAll("'", "''")}'`
  writeFileSync(
    config,
    [
      '[databases]',
      `${database} = host=${server.hostname} port=${server.port || 5432} dbname=${database} user=${user}` +
        (password ? ` password=${quote(password)}` : ''),
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      // no unix socket: the default directory may not be writable by the postgres user
      'unix_socket_dir =',
      // clients may log in as anyone; the server connection uses the user from [databases]
      'auth_type = any',
      'pool_mode = transaction',
      'max_client_conn = 1000',
      `default_pool_size = ${poolSize}`,
      // sent by pg and other drivers at startup; PgBouncer rejects unknown ones otherwise
      'ignore_startup_parameters = extra_float_digits,options',
      '',
    ].join('\n'),
  )
  chmodSync(dir, 0o755)
  chmodSync(config, 0o644)
  const asRoot = process.getuid?.() === 0
  const child: ChildProcess = asRoot
    ? spawn('runuser', ['-u', 'postgres', '--', binary, config], { stdio: ['ignore', 'ignore', 'pipe'] })
    : spawn(binary, [config], { stdio: ['ignore', 'ignore', 'pipe'] })
  let log = ''
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    log = (log + chunk).slice(-4000)
  })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
      await exited
      clearTimeout(timer)
    }
    rmSync(dir, { recursive: true, force: true })
  }
  const url = `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${encodeURIComponent(database)}`

  // Ready when a query goes through (bounded: about 10 s).
  for (let attempt = 0; ; attempt++) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop()
      throw new Error(`pgbouncer exited before it was ready:\n${log}`)
    }
    const client = new pg.Client({ connectionString: url })
    client.on('error', () => {})
    try {
      await client.connect()
      await client.query('SELECT 1')
      await client.end()
      break
    } catch (error) {
      await client.end().catch(() => {})
      if (attempt >= 100) {
        await stop()
        throw new Error(`pgbouncer did not answer on port ${port}: ${String(error)}\n${log}`)
      }
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
  }
  return { url, port, stop }
}
